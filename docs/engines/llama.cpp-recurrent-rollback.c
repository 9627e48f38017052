// llama.cpp v0.4.0: recurrent rollback (n_rs_seq, experimental) returns
// success but restores a wrong gated DeltaNet state when it reaches back
// to the state before the last llama_decode call. See
// llama.cpp-recurrent-rollback.md.
//
// Build against the release's headers and prebuilt libraries:
//   cc -o repro llama.cpp-recurrent-rollback.c -I$SRC/include -I$SRC/ggml/include
//      -L$BINS -l:libllama.v0.4.0.so -l:libggml.v0.4.0.so -l:libggml-base.so -Wl,-rpath,$BINS
//   ./repro $BINS MODEL.gguf [KEEP [restore]]
// MODEL: a qwen35 (gated DeltaNet hybrid) GGUF; the kvspec probe model works
// (see the .md). KEEP: verify tokens kept (default 0: roll back all three).
// restore: the sequence is first copied into a new context with
// llama_state_seq_get_data / llama_state_seq_set_data and rolled back there
// (the third trigger of the .md).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "ggml-backend.h"
#include "llama.h"

static void quiet(enum ggml_log_level l, const char *t, void *u) { (void)l; (void)t; (void)u; }

// Decodes tokens[0..n) at positions p0.. in sequence 0; the last one is an output.
static int decode(struct llama_context *ctx, const llama_token *tokens, int n, llama_pos p0) {
    struct llama_batch b = llama_batch_init(n, 0, 1);
    for (int i = 0; i < n; i++) {
        b.token[i] = tokens[i]; b.pos[i] = p0 + i; b.n_seq_id[i] = 1; b.seq_id[i][0] = 0;
        b.logits[i] = i == n - 1;
    }
    b.n_tokens = n;
    int rc = llama_decode(ctx, b);
    llama_batch_free(b);
    return rc;
}

static struct llama_context *context(struct llama_model *model) {
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 256; cp.n_seq_max = 1; cp.n_rs_seq = 8; cp.n_batch = 64; cp.n_ubatch = 64;
    return llama_init_from_model(model, cp);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s LIBDIR MODEL.gguf [KEEP [restore]]\n", argv[0]);
        return 2;
    }
    const int keep = argc > 3 ? atoi(argv[3]) : 0;
    const int restore = argc > 4 && argv[4][0] == 'r';
    llama_log_set(quiet, NULL);
    ggml_backend_load_all_from_path(argv[1]);
    llama_backend_init();
    struct llama_model *model = llama_model_load_from_file(argv[2], llama_model_default_params());
    if (!model) { fprintf(stderr, "cannot load %s\n", argv[2]); return 2; }
    const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    struct llama_context *a = context(model), *b = context(model);
    if (!a || !b || llama_n_rs_seq(a) < 3) { fprintf(stderr, "no rollback support\n"); return 2; }

    const llama_token prompt[5] = {0, 1, 2, 3, 4}, verify[3] = {100, 101, 102}, next = 200;
    decode(a, prompt, 5, 0);                       // both: positions 0..4
    decode(b, prompt, 5, 0);
    decode(a, verify, 3, 5);                       // a: a verify batch, positions 5..7
    if (keep > 0) decode(b, verify, keep, 5);      // b: only the tokens a keeps
    if (restore) {                                 // a's sequence into a new context
        struct llama_context *c = context(model);
        size_t n = llama_state_seq_get_size(a, 0);
        unsigned char *buf = malloc(n);
        if (!c || !buf || llama_state_seq_get_data(a, buf, n, 0) != n ||
            llama_state_seq_set_data(c, buf, n, 0) == 0) {
            fprintf(stderr, "state copy failed\n");
            return 2;
        }
        free(buf);
        llama_free(a);
        a = c;
        printf("restored into a new context: ");
    }
    const bool ok = llama_memory_seq_rm(llama_get_memory(a), 0, 5 + keep, -1);
    printf("llama_memory_seq_rm(a, 0, %d, -1) = %s, pos_max %d (b: %d)\n", 5 + keep,
           ok ? "true" : "false", llama_memory_seq_pos_max(llama_get_memory(a), 0),
           llama_memory_seq_pos_max(llama_get_memory(b), 0));
    decode(a, &next, 1, 5 + keep);                 // the same next token on both
    decode(b, &next, 1, 5 + keep);
    const float *la = llama_get_logits_ith(a, -1), *lb = llama_get_logits_ith(b, -1);
    float diff = 0;
    for (int i = 0; i < n_vocab; i++) diff = fmaxf(diff, fabsf(la[i] - lb[i]));
    printf("max |logit difference| after the rollback: %g\n", diff);
    llama_free(a); llama_free(b); llama_model_free(model);
    const int bug = ok && diff > 1e-3f;
    printf("%s\n", bug ? "BUG: the rollback was accepted but restored a different state" : "ok");
    return bug ? 1 : 0;
}
