"""The probe models of the llama.cpp adapter, written as GGUF with
llama.cpp's own gguf-py (see the package's docstring)."""

import sys

import numpy as np

def write_probe_model(path, layers, window, labels, gguf_py):
    """Writes the probe GGUF (see the module comment): gemma3, one head of
    dimension ``labels``, n_embd = labels * (len(layers) + 1)."""
    if gguf_py not in sys.path:
        sys.path.insert(0, gguf_py)
    import gguf  # llama.cpp's own writer, from the release's source tree
    V = labels
    E = V * (len(layers) + 1)
    w = gguf.GGUFWriter(path, "gemma3")
    w.add_context_length(1 << 16)
    w.add_embedding_length(E)
    w.add_block_count(len(layers))
    w.add_feed_forward_length(8)
    w.add_head_count(1)
    w.add_head_count_kv(1)
    w.add_key_length(V)
    w.add_value_length(V)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_vocab_size(V)
    w.add_tokenizer_model("none")
    if "swa" in layers:
        if layers not in (["swa"], ["swa", "full"]):
            raise ValueError("probe layers %s" % layers)
        w.add_sliding_window(window)
        w.add_sliding_window_pattern(2)  # layer 0 SWA, layer 1 (if any) full
    f16 = np.float16
    emb = np.zeros((V, E), f16)
    emb[np.arange(V), np.arange(V)] = 1
    w.add_tensor("token_embd.weight", emb)
    w.add_tensor("output_norm.weight", np.ones(E, np.float32))
    for i in range(len(layers)):
        b = "blk.%d." % i
        w.add_tensor(b + "attn_norm.weight", np.ones(E, np.float32))
        w.add_tensor(b + "attn_q.weight", np.zeros((V, E), f16))
        w.add_tensor(b + "attn_k.weight", np.zeros((V, E), f16))
        wv = np.zeros((V, E), f16)
        wv[np.arange(V), np.arange(V)] = 1               # v = the label's one-hot
        w.add_tensor(b + "attn_v.weight", wv)
        wo = np.zeros((E, V), f16)
        wo[V * (i + 1) + np.arange(V), np.arange(V)] = 1  # into block i + 1
        w.add_tensor(b + "attn_output.weight", wo)
        w.add_tensor(b + "post_attention_norm.weight", np.ones(E, np.float32))
        w.add_tensor(b + "attn_q_norm.weight", np.ones(V, np.float32))
        w.add_tensor(b + "attn_k_norm.weight", np.ones(V, np.float32))
        w.add_tensor(b + "ffn_norm.weight", np.ones(E, np.float32))
        for t in ("ffn_gate", "ffn_up"):
            w.add_tensor(b + t + ".weight", np.zeros((8, E), f16))
        w.add_tensor(b + "ffn_down.weight", np.zeros((E, 8), f16))
        w.add_tensor(b + "post_ffw_norm.weight", np.ones(E, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_recurrent_model(path, conv, vocab, gguf_py, head_dim=16):
    """Writes the recurrent probe GGUF: qwen35 (gated DeltaNet hybrid), layer
    0 a gated DeltaNet layer with conv kernel ``conv``, layer 1 full
    attention of head dim ``head_dim`` (16 or 32), small seeded random weights. Token ids are the trace's ids
    (mod ``vocab``): equal histories give equal states, and the states are
    compared bytes for bytes (llama_state_seq_get_data)."""
    if gguf_py not in sys.path:
        sys.path.insert(0, gguf_py)
    import gguf
    if head_dim not in (16, 32):
        raise ValueError("recurrent probe head dim %d (16 or 32)" % head_dim)
    E, D, NK, NV, FF, HEADS, HD = 32, 16, 1, 2, 16, 2, head_dim
    key_dim, value_dim = D * NK, D * NV
    conv_dim = 2 * key_dim + value_dim
    rng = np.random.default_rng(20261202)

    def rnd(*shape):
        return (rng.standard_normal(shape) * 0.2).astype(np.float32)
    w = gguf.GGUFWriter(path, "qwen35")
    w.add_context_length(1 << 16)
    w.add_embedding_length(E)
    w.add_block_count(2)
    w.add_feed_forward_length(FF)
    w.add_head_count(HEADS)
    w.add_head_count_kv(1)
    w.add_key_length(HD)
    w.add_value_length(HD)
    w.add_rope_dimension_count(HD)
    w.add_array("qwen35.rope.dimension_sections", [4 * HD // 16, 2 * HD // 16, 2 * HD // 16, 0])
    w.add_layer_norm_rms_eps(1e-6)
    w.add_uint32("qwen35.full_attention_interval", 2)
    w.add_uint32("qwen35.ssm.conv_kernel", conv)
    w.add_uint32("qwen35.ssm.inner_size", value_dim)
    w.add_uint32("qwen35.ssm.state_size", D)
    w.add_uint32("qwen35.ssm.time_step_rank", NV)
    w.add_uint32("qwen35.ssm.group_count", NK)
    w.add_vocab_size(vocab)
    w.add_tokenizer_model("none")
    w.add_tensor("token_embd.weight", rnd(vocab, E))
    w.add_tensor("output_norm.weight", np.ones(E, np.float32))
    for i in range(2):
        b = "blk.%d." % i
        w.add_tensor(b + "attn_norm.weight", np.ones(E, np.float32))
        w.add_tensor(b + "post_attention_norm.weight", np.ones(E, np.float32))
        if i == 0:
            w.add_tensor(b + "attn_qkv.weight", rnd(conv_dim, E))
            w.add_tensor(b + "attn_gate.weight", rnd(value_dim, E))
            w.add_tensor(b + "ssm_conv1d.weight", rnd(conv_dim, conv))
            w.add_tensor(b + "ssm_dt.bias", rnd(NV))
            w.add_tensor(b + "ssm_a", -np.abs(rnd(NV)) - 0.1)
            w.add_tensor(b + "ssm_beta.weight", rnd(NV, E))
            w.add_tensor(b + "ssm_alpha.weight", rnd(NV, E))
            w.add_tensor(b + "ssm_norm.weight", np.ones(D, np.float32))
            w.add_tensor(b + "ssm_out.weight", rnd(E, value_dim))
        else:
            w.add_tensor(b + "attn_q.weight", rnd(HD * HEADS * 2, E))
            w.add_tensor(b + "attn_k.weight", rnd(HD, E))
            w.add_tensor(b + "attn_v.weight", rnd(HD, E))
            w.add_tensor(b + "attn_output.weight", rnd(E, HD * HEADS))
            w.add_tensor(b + "attn_q_norm.weight", np.ones(HD, np.float32))
            w.add_tensor(b + "attn_k_norm.weight", np.ones(HD, np.float32))
        w.add_tensor(b + "ffn_gate.weight", rnd(FF, E))
        w.add_tensor(b + "ffn_up.weight", rnd(FF, E))
        w.add_tensor(b + "ffn_down.weight", rnd(E, FF))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
