// llama.cpp's greedy continuations and top-5 log-probabilities on a GGUF, from
// its raw logits (llama-server drops probabilities of tokens that end inside a
// UTF-8 character, which random-weight models emit often).
//
// Build against a llama.cpp build (see scripts/families/README.md):
//   g++ -O2 -std=c++17 llama_logits.cpp -I$LLAMA/include -I$LLAMA/ggml/include \
//       -L$LLAMA/build/bin -lllama -lggml -lggml-base -o llama_logits
// Run: llama_logits MODEL.gguf PROMPTS.txt CONTEXT > OUT.jsonl
// Rows: {"prompt", "prompt_ids", "ids", "top5"} as in tests/golden. The prompt is
// tokenized by llama.cpp with special tokens added as the metadata asks.
#include "llama.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

static std::string json_str(const std::string & s) {
    std::string o = "\"";
    for (unsigned char c : s) {
        if (c == '"' || c == '\\') { o += '\\'; o += (char) c; }
        else if (c < 0x20) { char b[8]; snprintf(b, sizeof b, "\\u%04x", c); o += b; }
        else o += (char) c;
    }
    return o + "\"";
}

int main(int argc, char ** argv) {
    if (argc != 4) { fprintf(stderr, "usage: llama_logits MODEL PROMPTS CONTEXT\n"); return 2; }
    const int steps = 32;
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    llama_model * model = llama_model_load_from_file(argv[1], mp);
    if (!model) { fprintf(stderr, "cannot load %s\n", argv[1]); return 1; }
    const llama_vocab * vocab = llama_model_get_vocab(model);
    const int n_vocab = llama_vocab_n_tokens(vocab);
    std::ifstream prompts(argv[2]);
    std::string text;
    while (std::getline(prompts, text)) {
        if (text.empty()) continue;
        llama_context_params cp = llama_context_default_params();
        cp.n_ctx = std::stoi(argv[3]);
        cp.n_batch = 512;
        cp.n_threads = 2;
        cp.n_threads_batch = 2;
        cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
        llama_context * ctx = llama_init_from_model(model, cp);
        std::vector<llama_token> ids(text.size() + 8);
        int n = llama_tokenize(vocab, text.c_str(), text.size(), ids.data(), ids.size(), true, false);
        ids.resize(n);
        std::vector<llama_token> prompt = ids, out;
        std::string top5 = "[";
        llama_batch batch = llama_batch_get_one(ids.data(), ids.size());
        for (int s = 0; s < steps; s++) {
            if (llama_decode(ctx, batch) != 0) { fprintf(stderr, "decode failed\n"); return 1; }
            const float * logits = llama_get_logits_ith(ctx, -1);
            double mx = *std::max_element(logits, logits + n_vocab), sum = 0;
            for (int i = 0; i < n_vocab; i++) sum += std::exp((double) logits[i] - mx);
            std::vector<int> order(n_vocab);
            std::iota(order.begin(), order.end(), 0);
            std::partial_sort(order.begin(), order.begin() + 5, order.end(),
                              [&](int a, int b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
            top5 += s ? ",[" : "[";
            for (int k = 0; k < 5; k++) {
                char b[64];
                snprintf(b, sizeof b, "%s{\"id\":%d,\"logprob\":%.9g}", k ? "," : "", order[k], (double) logits[order[k]] - mx - std::log(sum));
                top5 += b;
            }
            top5 += "]";
            out.push_back(order[0]);
            batch = llama_batch_get_one(&out.back(), 1);
        }
        top5 += "]";
        std::string row = "{\"prompt\":" + json_str(text) + ",\"prompt_ids\":[";
        for (size_t i = 0; i < prompt.size(); i++) row += (i ? "," : "") + std::to_string(prompt[i]);
        row += "],\"ids\":[";
        for (size_t i = 0; i < out.size(); i++) row += (i ? "," : "") + std::to_string(out[i]);
        row += "],\"top5\":" + top5 + "}";
        printf("%s\n", row.c_str());
        llama_free(ctx);
    }
    llama_model_free(model);
    return 0;
}
