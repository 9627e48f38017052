/* A thin C layer over llama.h for kvspec's llama.cpp adapter
 * (python/kvspec/adapters/llama_cpp.py). It exists so that the Python side
 * never mirrors llama.h's by-value structs (llama_context_params changes
 * between releases): every entry point takes plain integers and pointers.
 * Compiled at test time against the headers of the llama.cpp release that
 * node-llama-cpp ships (engines/llama.cpp/package.json), linked to its
 * prebuilt libllama. Not part of kvspec's library. */
#include <stdlib.h>
#include <string.h>

#include "ggml-backend.h"
#include "llama.h"

static void quiet(enum ggml_log_level level, const char *text, void *user) {
    (void)level; (void)text; (void)user;
}

int kvl_init(const char *libdir, int verbose) {
    if (!verbose) llama_log_set(quiet, NULL);
    ggml_backend_load_all_from_path(libdir);
    llama_backend_init();
    return ggml_backend_dev_count() > 0 ? 0 : -1;
}

void *kvl_model(const char *path) {
    struct llama_model_params p = llama_model_default_params();
    p.n_gpu_layers = 0;
    return llama_model_load_from_file(path, p);
}

void kvl_model_free(void *model) { llama_model_free((struct llama_model *)model); }

/* A context for the probe model: embeddings of every token (pooling none),
 * K/V cache of ggml types type_k / type_v (the adapter's default f32, so
 * that nothing is rounded), flash attention on or off (a quantized V cache
 * needs it on). */
void *kvl_context(void *model, int n_ctx, int n_seq_max, int n_batch, int n_ubatch,
                  int swa_full, int kv_unified, int n_rs_seq, int type_k, int type_v,
                  int flash_attn) {
    struct llama_context_params p = llama_context_default_params();
    p.n_ctx = (uint32_t)n_ctx;
    p.n_batch = (uint32_t)n_batch;
    p.n_ubatch = (uint32_t)n_ubatch;
    p.n_seq_max = (uint32_t)n_seq_max;
    p.n_rs_seq = (uint32_t)n_rs_seq;
    p.n_threads = 1;
    p.n_threads_batch = 1;
    p.embeddings = 1;
    p.pooling_type = LLAMA_POOLING_TYPE_NONE;
    p.flash_attn_type = flash_attn ? LLAMA_FLASH_ATTN_TYPE_ENABLED : LLAMA_FLASH_ATTN_TYPE_DISABLED;
    p.type_k = (enum ggml_type)type_k;
    p.type_v = (enum ggml_type)type_v;
    p.swa_full = swa_full != 0;
    p.kv_unified = kv_unified != 0;
    p.no_perf = 1;
    return llama_init_from_model((struct llama_model *)model, p);
}

void kvl_free(void *ctx) { llama_free((struct llama_context *)ctx); }

int kvl_n_embd(void *model) { return llama_model_n_embd((const struct llama_model *)model); }

/* A batch of n tokens (token ids, positions, one sequence id each) with no
 * output requested yet; the caller sets logits[] and frees it. */
static struct llama_batch make_batch(int n, const int *tokens, const int *pos, const int *seq) {
    struct llama_batch b = llama_batch_init(n, 0, 1);
    for (int i = 0; i < n; i++) {
        b.token[i] = tokens[i];
        b.pos[i] = pos[i];
        b.n_seq_id[i] = 1;
        b.seq_id[i][0] = seq[i];
        b.logits[i] = 0;
    }
    b.n_tokens = n;
    return b;
}

/* One llama_decode of n tokens (token ids, positions, one sequence id
 * each), every token an output. On success (0) writes n * n_embd floats
 * of embeddings to out. Returns llama_decode's status otherwise. */
int kvl_decode(void *ctxp, int n, const int *tokens, const int *pos, const int *seq, float *out) {
    struct llama_context *ctx = (struct llama_context *)ctxp;
    struct llama_batch b = make_batch(n, tokens, pos, seq);
    for (int i = 0; i < n; i++) b.logits[i] = 1;
    int rc = llama_decode(ctx, b);
    llama_batch_free(b);
    if (rc != 0) return rc;
    int d = llama_model_n_embd(llama_get_model(ctx));
    for (int i = 0; i < n; i++) {
        const float *e = llama_get_embeddings_ith(ctx, i);
        if (!e) return -100;
        memcpy(out + (size_t)i * d, e, sizeof(float) * (size_t)d);
    }
    return 0;
}

int kvl_seq_rm(void *ctx, int seq, int p0, int p1) {
    return llama_memory_seq_rm(llama_get_memory((struct llama_context *)ctx), seq, p0, p1) ? 1 : 0;
}

void kvl_seq_cp(void *ctx, int src, int dst, int p0, int p1) {
    llama_memory_seq_cp(llama_get_memory((struct llama_context *)ctx), src, dst, p0, p1);
}

int kvl_seq_pos_max(void *ctx, int seq) {
    return llama_memory_seq_pos_max(llama_get_memory((struct llama_context *)ctx), seq);
}

int kvl_seq_pos_min(void *ctx, int seq) {
    return llama_memory_seq_pos_min(llama_get_memory((struct llama_context *)ctx), seq);
}

void kvl_clear(void *ctx) { llama_memory_clear(llama_get_memory((struct llama_context *)ctx), 1); }

size_t kvl_state_size(void *ctx, int seq) {
    return llama_state_seq_get_size((struct llama_context *)ctx, seq);
}

size_t kvl_state_get(void *ctx, unsigned char *dst, size_t size, int seq) {
    return llama_state_seq_get_data((struct llama_context *)ctx, dst, size, seq);
}

size_t kvl_state_set(void *ctx, const unsigned char *src, size_t size, int seq) {
    return llama_state_seq_set_data((struct llama_context *)ctx, src, size, seq);
}

/* A decode whose only output is each sequence's last token (no copy out):
 * the usual generation batch, for comparing the engine's split paths. */
int kvl_decode_last(void *ctxp, int n, const int *tokens, const int *pos, const int *seq) {
    struct llama_batch b = make_batch(n, tokens, pos, seq);
    for (int i = 0; i < n; i++) b.logits[i] = i + 1 == n || seq[i + 1] != seq[i];
    int rc = llama_decode((struct llama_context *)ctxp, b);
    llama_batch_free(b);
    return rc;
}

void kvl_set_embeddings(void *ctx, int on) { llama_set_embeddings((struct llama_context *)ctx, on != 0); }
