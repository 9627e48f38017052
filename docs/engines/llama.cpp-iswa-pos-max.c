// llama.cpp v0.4.0: after llama_state_seq_set_data, a hybrid full + SWA
// model (llama_kv_cache_iswa) reports a sequence as empty
// (llama_memory_seq_pos_max == -1) while its full-attention cache still
// holds the sequence's prefix. See llama.cpp-iswa-pos-max.md.
//
// Build against the release's headers and prebuilt libraries:
//   cc -o repro llama.cpp-iswa-pos-max.c -I$SRC/include -I$SRC/ggml/include
//      -L$BINS -l:libllama.v0.4.0.so -l:libggml.v0.4.0.so -l:libggml-base.so -Wl,-rpath,$BINS
//   ./repro $BINS MODEL.gguf
// MODEL: any gemma3 model with sliding_window 2 and a full-attention layer;
// the kvspec probe model works (see the .md for the one-line command).
#include <stdio.h>

#include "ggml-backend.h"
#include "llama.h"

static void quiet(enum ggml_log_level l, const char *t, void *u) { (void)l; (void)t; (void)u; }

static int decode(struct llama_context *ctx, llama_token tok, llama_pos pos, llama_seq_id seq) {
    struct llama_batch b = llama_batch_init(1, 0, 1);
    b.token[0] = tok; b.pos[0] = pos; b.n_seq_id[0] = 1; b.seq_id[0][0] = seq; b.logits[0] = 1;
    b.n_tokens = 1;
    int rc = llama_decode(ctx, b);
    llama_batch_free(b);
    return rc;
}

int main(int argc, char **argv) {
    if (argc < 3) { fprintf(stderr, "usage: %s LIBDIR MODEL.gguf\n", argv[0]); return 2; }
    llama_log_set(quiet, NULL);
    ggml_backend_load_all_from_path(argv[1]);
    llama_backend_init();
    struct llama_model *model = llama_model_load_from_file(argv[2], llama_model_default_params());
    if (!model) { fprintf(stderr, "cannot load %s\n", argv[2]); return 2; }
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 512; cp.n_seq_max = 2; cp.embeddings = 1;  // swa_full, kv_unified: defaults
    struct llama_context *ctx = llama_init_from_model(model, cp);
    llama_memory_t mem = llama_get_memory(ctx);

    for (llama_pos p = 0; p < 6; p++) decode(ctx, 1 + p, p, 0);         // seq 0: positions 0..5
    static unsigned char buf[1 << 22];
    size_t n = llama_state_seq_get_data(ctx, buf, sizeof buf, 0);
    size_t m = llama_state_seq_set_data(ctx, buf, n, 1);                 // seq 1 := seq 0
    printf("copied %zu bytes (set_data: %zu)\n", n, m);

    llama_memory_seq_rm(mem, 0, 4, -1);                                  // drop positions 4, 5
    llama_memory_seq_rm(mem, 1, 4, -1);
    for (llama_seq_id s = 0; s < 2; s++)
        printf("seq %d after seq_rm(%d, 4, -1): pos_min %d pos_max %d (expected 0 and 3)\n", s, s,
               llama_memory_seq_pos_min(mem, s), llama_memory_seq_pos_max(mem, s));

    // The batch check trusts pos_max: a restart at position 0 is accepted
    // on seq 1 while its full-attention cache still holds positions 0..3.
    const int bug = llama_memory_seq_pos_max(mem, 1) != 3;
    printf("decode at position 0: seq 0 -> %d, seq 1 -> %d (expected both refused)\n",
           decode(ctx, 50, 0, 0), decode(ctx, 51, 0, 1));
    llama_free(ctx);
    llama_model_free(model);
    printf("%s\n", bug ? "BUG: the restored sequence reports itself empty" : "ok");
    return bug ? 1 : 0;
}
