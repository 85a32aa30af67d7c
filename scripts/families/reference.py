#!/usr/bin/env python3
"""The float64 reference of ferrox's supported families: the exact function a
GGUF defines, written from llama.cpp's graphs (src/models/{llama,qwen2,qwen3,
qwen3moe,phi3,gemma2,openai-moe,qwen35,gemma4}.cpp, delta-net-base.cpp,
llm_graph_context::build_moe_ffn, ggml's rope_yarn, swiglu_oai, ssm_conv and
soft_max with sinks), independent of ferrox's code.

Every weight is dequantized with the gguf package (gguf-py); all arithmetic is
float64 with no activation quantization. For each prompt (token ids) it writes
the greedy continuation and the top-5 natural-log probabilities of every step.

    reference.py MODEL.gguf PROMPTS.jsonl OUT.jsonl [--context N]
    reference.py --perplexity CTX [--bos ID] MODEL.gguf TOKENS.json OUT.json
    reference.py --embed POOLING MODEL.gguf PROMPTS.jsonl OUT.jsonl

PROMPTS.jsonl rows carry {"prompt", "prompt_ids"}; OUT rows add {"ids", "top5"},
with top5 entries {"id", "logprob"} as in tests/golden.

With --perplexity it measures a text (its token ids, a JSON array) as
llama-perplexity does: chunks of CTX tokens, each from an empty context with
its first token replaced by BOS when --bos is given, scored on positions
CTX/2 .. CTX-2; OUT is {"ctx", "bos", "running", "ppl"}, the perplexity after
each chunk.
With --embed it writes each prompt's embedding: its hidden states after the
output norm, pooled (mean, cls, last, or none: every token's), unnormalized, as
{"prompt", "prompt_ids", "pooling", "embedding"} (a list of rows). BERT files
run the encoder (class Bert); `rank` gives a reranker's score, [[score]].
The context (default: the model's) picks LongRoPE's factor set, as llama.cpp's -c.
"""
import json
import math
import sys

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize

STEPS = 32
# The architectures whose graphs this file follows; any other (Gemma 3's
# windows and QK norms, say) would be computed as some other function.
WRITTEN = {"llama", "qwen2", "qwen3", "qwen3moe", "phi3", "gemma2", "gpt-oss", "qwen35", "gemma4"}
# and the encoders of class Bert: bert, nomic-bert.


class Model:
    def __init__(self, path, context=None):
        r = GGUFReader(path)
        self.meta = {}
        for k, f in r.fields.items():
            if k.startswith("tokenizer.ggml.tokens") or k.startswith("tokenizer.ggml.merges"):
                continue
            try:
                v = f.contents()
            except Exception:
                continue
            self.meta[k] = v
        self.t = {}
        for t in r.tensors:
            w = dequantize(t.data, t.tensor_type).astype(np.float64)
            shape = [int(x) for x in t.shape]
            self.t[t.name] = w.reshape(list(reversed(shape))) if len(shape) > 1 else w.reshape(-1)
        m = self.meta
        a = self.arch = m["general.architecture"]
        if a not in WRITTEN:
            sys.exit(f"reference.py: {a} is not written here (only {', '.join(sorted(WRITTEN))})")
        g = lambda k, d=None: m.get(f"{a}.{k}", d)
        # Multi-token-prediction blocks follow the trunk (Qwen3.5's MTP head).
        self.n_draft = g("nextn_predict_layers", 0)
        self.n_layer = g("block_count") - self.n_draft
        self.d = g("embedding_length")
        self.nh = g("attention.head_count")
        self.nkv = g("attention.head_count_kv", self.nh)
        self.dk = g("attention.key_length", self.d // self.nh)
        self.dv = g("attention.value_length", self.dk)
        self.eps = g("attention.layer_norm_rms_epsilon", 1e-5)
        self.n_ctx_train = g("context_length")
        self.context = context or self.n_ctx_train
        self.rope_dim = g("rope.dimension_count", self.dk)
        default_base = {"qwen2": 1e6, "qwen3": 1e6, "qwen3moe": 1e6, "qwen35": 1e7}.get(a, 1e4)
        self.base = g("rope.freq_base", default_base)
        self.orig_ctx = g("rope.scaling.original_context_length", self.n_ctx_train)
        self.neox = a != "llama"
        # RoPE scaling as llama.cpp reads it (default "linear" with factor 1).
        kind = g("rope.scaling.type", "linear")
        factor = g("rope.scaling.factor", 0.0) or 1.0
        self.freq_scale = 1.0 / factor
        self.ext = 1.0 if kind == "yarn" else 0.0
        attn_factor = g("rope.scaling.attn_factor", 1.0)
        if self.ext:
            mscale = 1.0 if factor <= 1 else 0.1 * math.log(factor) + 1.0
            attn_factor *= mscale / (1.0 + 0.1 * math.log(factor))
            attn_factor *= 1.0 + 0.1 * math.log(1.0 / self.freq_scale)
        self.mscale = attn_factor
        self.ff = None
        if "rope_freqs.weight" in self.t:
            self.ff = self.t["rope_freqs.weight"]
        elif "rope_factors_long.weight" in self.t:
            long = self.context > self.orig_ctx
            self.ff = self.t["rope_factors_long.weight" if long else "rope_factors_short.weight"]
        # Gemma: windows, soft-caps, scaled embeddings, attention scale.
        self.gemma = a == "gemma2"
        # gpt-oss: sinks, biases, windows on even layers, top-k-then-softmax
        # routing, clamped SwiGLU; its pre-FFN norm is named post_attention_norm.
        self.oss = a == "gpt-oss"
        # YaRN's correction range is rounded to whole dims (HF's `truncate`,
        # ggml always) except for gpt-oss, whose config says truncate: false
        # (HF's _compute_yarn_parameters; vLLM and SGLang follow it).
        self.yarn_truncate = not self.oss
        self.window = None
        if self.gemma:
            self.window = g("attention.sliding_window", 4096)
        if self.oss:
            self.window = g("attention.sliding_window", 128)
        self.attn_cap = g("attn_logit_softcapping", 50.0) if self.gemma else None
        self.final_cap = g("final_logit_softcapping", 30.0) if self.gemma else None
        self.scale = 1.0 / math.sqrt(self.dk)
        # Mixture of experts (qwen3moe): softmax routing, top-k, weights
        # renormalized to sum to 1, optionally scaled.
        # Qwen3.5: gated delta-net layers where attention.recurrent_layers says
        # (else all but every full_attention_interval-th), gated attention with
        # M-RoPE, which for text (every section at the same position) is NeoX.
        self.qwen35 = a == "qwen35"
        self.recurrent = [False] * self.n_layer
        if self.qwen35:
            flags = g("attention.recurrent_layers")
            interval = g("full_attention_interval", 4)
            self.recurrent = [bool(flags[i]) if flags is not None else (i + 1) % interval != 0
                              for i in range(self.n_layer)]
            self.conv_k = g("ssm.conv_kernel")
            self.ssm_dk = g("ssm.state_size")
            self.ssm_nk = g("ssm.group_count")
            self.ssm_nv = g("ssm.time_step_rank")
        self.gemma4 = a == "gemma4"
        if self.gemma4:
            self.init_gemma4(g)
        self.n_expert = g("expert_count", 0)
        self.n_expert_used = g("expert_used_count", 0)
        self.expert_scale = g("expert_weights_scale", 0.0)

    def init_gemma4(self, g):
        """Gemma 4's per-layer shapes (llama_model_gemma4::load_arch_hparams)."""
        n = self.n_layer
        per_layer = lambda v: list(v) if isinstance(v, list) else [v] * n
        self.swa = [bool(f) for f in g("attention.sliding_window_pattern")]
        self.window = g("attention.sliding_window")
        self.l_nkv = per_layer(g("attention.head_count_kv"))
        self.l_dk = [g("attention.key_length_swa") if w else self.dk for w in self.swa]
        self.l_rot = [g("rope.dimension_count_swa") if w else self.rope_dim for w in self.swa]
        self.l_base = [g("rope.freq_base_swa", self.base) if w else self.base for w in self.swa]
        first = n - g("attention.shared_kv_layers", 0)
        self.l_src = [il if il < first else first - (2 if self.swa[il] else 1) for il in range(n)]
        self.epl = g("embedding_length_per_layer_input")
        self.final_cap = g("final_logit_softcapping")

    def rope_gemma4(self, x, pos, il):
        """NeoX over the layer's rotated dims; full layers divide by rope_freqs."""
        n, y = self.l_rot[il], x.copy()
        theta = pos * self.l_base[il] ** (-2.0 * np.arange(n // 2) / n)
        if not self.swa[il]:
            theta = theta / self.t["rope_freqs.weight"]
        c, s = np.cos(theta), np.sin(theta)
        a, b = x[:, : n // 2], x[:, n // 2 : n]
        y[:, : n // 2] = a * c - b * s
        y[:, n // 2 : n] = a * s + b * c
        return y

    def per_layer_inputs(self, token, x):
        """Each layer's per-layer token input, [n_layer, epl]."""
        proj = (self.t["per_layer_model_proj.weight"] @ x / math.sqrt(self.d)).reshape(self.n_layer, self.epl)
        proj = np.stack([self.norm(r, self.t["per_layer_proj_norm.weight"]) for r in proj])
        embd = self.t["per_layer_token_embd.weight"][token].reshape(self.n_layer, self.epl)
        return (proj + embd * math.sqrt(self.epl)) / math.sqrt(2)

    def attention_gemma4(self, p, il, h, pos, cache):
        nkv, dk = self.l_nkv[il], self.l_dk[il]
        rms = lambda r: r / np.sqrt(np.mean(r * r) + self.eps)
        q = self.t[p + "attn_q.weight"].dot(h).reshape(self.nh, dk)
        q = self.rope_gemma4(np.stack([self.norm(r, self.t[p + "attn_q_norm.weight"]) for r in q]), pos, il)
        src = self.l_src[il]
        if src == il:
            kraw = self.t[p + "attn_k.weight"] @ h
            vraw = self.t[p + "attn_v.weight"] @ h if p + "attn_v.weight" in self.t else kraw
            k = np.stack([self.norm(r, self.t[p + "attn_k_norm.weight"]) for r in kraw.reshape(nkv, dk)])
            v = np.stack([rms(r) for r in vraw.reshape(nkv, dk)])
            cache[il].append((self.rope_gemma4(k, pos, il), v))
        lo = max(0, pos + 1 - self.window) if self.swa[il] else 0
        ks = np.stack([c[0] for c in cache[src][lo:]])
        vs = np.stack([c[1] for c in cache[src][lo:]])
        group = self.nh // nkv
        out = np.zeros((self.nh, dk))
        for hd in range(self.nh):
            sc = ks[:, hd // group, :] @ q[hd]  # unscaled
            e = np.exp(sc - sc.max())
            out[hd] = (e / e.sum()) @ vs[:, hd // group, :]
        return self.lin(p + "attn_output", out.reshape(-1))

    def moe_gemma4(self, p, x, gelu):
        """Gemma 4 26B-A4B's experts beside the dense path: routed by x normed
        without a weight, / sqrt(d), times ffn_gate_inp.scale; softmax, top-k,
        renormalized; each expert's output times ffn_down_exps.scale."""
        r = x / np.sqrt(np.mean(x * x) + self.eps) / math.sqrt(self.d) * self.t[p + "ffn_gate_inp.scale"]
        logits = self.t[p + "ffn_gate_inp.weight"] @ r
        probs = np.exp(logits - logits.max())
        probs /= probs.sum()
        chosen = np.argsort(-probs, kind="stable")[: self.n_expert_used]
        wts = probs[chosen] / max(probs[chosen].sum(), 6.103515625e-5)
        h = self.norm(x, self.t[p + "pre_ffw_norm_2.weight"])
        gate_up = self.t[p + "ffn_gate_up_exps.weight"]  # [e, 2 ff, d]
        ff = gate_up.shape[1] // 2
        scales = self.t.get(p + "ffn_down_exps.scale")
        out = np.zeros(self.d)
        for e, we in zip(chosen, wts):
            gu = gate_up[e] @ h
            y = self.t[p + "ffn_down_exps.weight"][e] @ (gelu(gu[:ff]) * gu[ff:])
            out += we * (y if scales is None else scales[e] * y)
        return self.norm(out, self.t[p + "post_ffw_norm_2.weight"])

    def trunk_gemma4(self, token, pos, cache):
        """One token of Gemma 4 (src/models/gemma4.cpp, dense layers)."""
        gelu = lambda g: 0.5 * g * (1 + np.tanh(math.sqrt(2 / math.pi) * (g + 0.044715 * g**3)))
        x = self.t["token_embd.weight"][token] * math.sqrt(self.d)
        inputs = self.per_layer_inputs(token, x) if self.epl else None
        for il in range(self.n_layer):
            p = f"blk.{il}."
            w = lambda name: self.t[p + name + ".weight"]
            o = self.attention_gemma4(p, il, self.norm(x, w("attn_norm")), pos, cache)
            x = x + self.norm(o, w("post_attention_norm"))
            h = self.norm(x, w("ffn_norm"))
            f = w("ffn_down") @ (gelu(w("ffn_gate") @ h) * (w("ffn_up") @ h))
            if p + "ffn_gate_inp.weight" in self.t:
                f = self.norm(f, w("post_ffw_norm_1")) + self.moe_gemma4(p, x, gelu)
            x = x + self.norm(f, w("post_ffw_norm"))
            if inputs is not None:
                y = w("proj") @ (gelu(w("inp_gate") @ x) * inputs[il])
                x = x + self.norm(y, w("post_norm"))
            if p + "layer_output_scale.weight" in self.t:
                x = x * w("layer_output_scale")[0]
        return self.norm(x, self.t["output_norm.weight"])

    def is_swa(self, il):
        return (self.gemma or self.oss) and il % 2 == 0

    def angles(self, pos):
        n = self.rope_dim
        i = np.arange(n // 2)
        theta_extrap = pos * self.base ** (-2.0 * i / n)
        if self.ff is not None:
            theta_extrap = theta_extrap / self.ff
        theta_interp = self.freq_scale * theta_extrap
        theta = theta_interp
        if self.ext:
            def corr(beta):
                return n * math.log(self.orig_ctx / (beta * 2 * math.pi)) / (2 * math.log(self.base))
            low, high = corr(32.0), corr(1.0)
            if self.yarn_truncate:
                low, high = math.floor(low), math.ceil(high)
            low, high = max(0.0, low), min(n - 1.0, high)
            y = (i - low) / max(0.001, high - low)
            ramp = (1 - np.clip(y, 0, 1)) * self.ext
            theta = theta_interp * (1 - ramp) + theta_extrap * ramp
        return np.cos(theta) * self.mscale, np.sin(theta) * self.mscale

    def rope(self, x, pos):
        # x: [heads, dk]
        c, s = self.angles(pos)
        n = self.rope_dim
        y = x.copy()
        if self.neox:
            a, b = x[:, : n // 2], x[:, n // 2 : n]
            y[:, : n // 2] = a * c - b * s
            y[:, n // 2 : n] = a * s + b * c
        else:
            a, b = x[:, 0:n:2], x[:, 1:n:2]
            y[:, 0:n:2] = a * c - b * s
            y[:, 1:n:2] = a * s + b * c
        return y

    def norm(self, x, w):
        return x / np.sqrt(np.mean(x * x) + self.eps) * w

    def lin(self, name, x):
        y = self.t[name + ".weight"] @ x
        if name + ".bias" in self.t:
            y = y + self.t[name + ".bias"]
        return y

    def glu(self, g, up):
        if self.gemma:
            return 0.5 * g * (1 + np.tanh(math.sqrt(2 / math.pi) * (g + 0.044715 * g**3))) * up
        if self.oss:
            x = np.minimum(g, 7.0)
            return x / (1 + np.exp(-1.702 * x)) * (np.clip(up, -7.0, 7.0) + 1)
        return g / (1 + np.exp(-g)) * up

    def qkv(self, p, h):
        qd, kd = self.nh * self.dk, self.nkv * self.dk
        if p + "attn_qkv.weight" in self.t:
            f = self.lin(p + "attn_qkv", h)
            return f[:qd], f[qd : qd + kd], f[qd + kd :]
        return self.lin(p + "attn_q", h), self.lin(p + "attn_k", h), self.lin(p + "attn_v", h)

    def moe(self, p, h):
        logits = self.lin(p + "ffn_gate_inp", h)
        if self.oss:
            # SOFTMAX_WEIGHT: the top logits, a softmax over those alone.
            chosen = np.argsort(-logits, kind="stable")[: self.n_expert_used]
            w = np.exp(logits[chosen] - logits[chosen].max())
            w /= w.sum()
        else:
            probs = np.exp(logits - logits.max())
            probs /= probs.sum()
            chosen = np.argsort(-probs, kind="stable")[: self.n_expert_used]
            w = probs[chosen]
            w = w / max(w.sum(), 6.103515625e-5)
        if self.expert_scale not in (0.0, 1.0):
            w = w * self.expert_scale
        def expert(kind, e, x):
            y = self.t[p + f"ffn_{kind}_exps.weight"][e] @ x
            bias = p + f"ffn_{kind}_exps.bias"
            return y + self.t[bias][e] if bias in self.t else y
        f = np.zeros(self.d)
        for e, we in zip(chosen, w):
            gate, up = expert("gate", e, h), expert("up", e, h)
            f += we * expert("down", e, self.glu(gate, up))
        return f

    def delta_net(self, p, h, state):
        """One token of a gated delta-net layer; state = (conv inputs, [nv] S)."""
        dk, nk, nv = self.ssm_dk, self.ssm_nk, self.ssm_nv
        mixed = self.t[p + "attn_qkv.weight"] @ h
        z = self.t[p + "attn_gate.weight"] @ h
        beta = 1 / (1 + np.exp(-(self.t[p + "ssm_beta.weight"] @ h)))
        alpha = self.t[p + "ssm_alpha.weight"] @ h + self.t[p + "ssm_dt.bias"]
        softplus = np.where(alpha > 20, alpha, np.log1p(np.exp(np.minimum(alpha, 20))))
        decay = np.exp(softplus * self.t[p + "ssm_a"])
        convs, S = state
        window = np.stack(convs[-(self.conv_k - 1):] + [mixed])  # [K, C], oldest first
        convs.append(mixed)
        w = self.t[p + "ssm_conv1d.weight"]  # [C, K]
        y = (window.T * w).sum(axis=1)
        y = y / (1 + np.exp(-y))
        q = y[: nk * dk].reshape(nk, dk)
        k = y[nk * dk : 2 * nk * dk].reshape(nk, dk)
        v = y[2 * nk * dk :].reshape(nv, dk)
        l2 = lambda r: r / np.sqrt((r * r).sum() + self.eps)
        q = np.stack([l2(r) for r in q]) / math.sqrt(dk)
        k = np.stack([l2(r) for r in k])
        out = np.zeros((nv, dk))
        for hd in range(nv):
            kh = hd % nk  # ggml's tiled broadcast of key heads over value heads
            S[hd] = decay[hd] * S[hd]
            S[hd] = S[hd] + beta[hd] * np.outer(v[hd] - S[hd] @ k[kh], k[kh])
            o = S[hd] @ q[kh]
            zh = z[hd * dk : (hd + 1) * dk]
            out[hd] = self.norm(o, self.t[p + "ssm_norm.weight"]) * zh / (1 + np.exp(-zh))
        return self.t[p + "ssm_out.weight"] @ out.reshape(-1)

    def step(self, token, pos, cache):
        """The next-token logits after `token` at `pos`."""
        h = self.trunk(token, pos, cache)
        logits = self.t.get("output.weight", self.t["token_embd.weight"]) @ h
        if self.final_cap:
            logits = self.final_cap * np.tanh(logits / self.final_cap)
        return logits

    def trunk(self, token, pos, cache):
        """The hidden state of `token` at `pos` after the output norm (what
        llama.cpp names result_norm, and embeddings pool)."""
        if self.gemma4:
            return self.trunk_gemma4(token, pos, cache)
        x = self.t["token_embd.weight"][token].copy()
        if self.gemma:
            x = x * math.sqrt(self.d)
        for il in range(self.n_layer):
            p = f"blk.{il}."
            h = self.norm(x, self.t[p + "attn_norm.weight"])
            if self.recurrent[il]:
                if not cache[il]:
                    c = self.t[p + "attn_qkv.weight"].shape[0]
                    cache[il].append(([np.zeros(c)] * (self.conv_k - 1),
                                      [np.zeros((self.ssm_dk, self.ssm_dk)) for _ in range(self.ssm_nv)]))
                x = x + self.delta_net(p, h, cache[il][0])
                hf = self.norm(x, self.t[p + "post_attention_norm.weight"])
                f = self.lin(p + "ffn_down", self.glu(self.lin(p + "ffn_gate", hf), self.lin(p + "ffn_up", hf)))
                x = x + f
                continue
            gate = None
            if self.qwen35:
                qg = self.lin(p + "attn_q", h).reshape(self.nh, 2 * self.dk)
                q, gate = qg[:, : self.dk].reshape(-1), qg[:, self.dk :].reshape(-1)
                k, v = self.lin(p + "attn_k", h), self.lin(p + "attn_v", h)
            else:
                q, k, v = self.qkv(p, h)
            q = q.reshape(self.nh, self.dk)
            k = k.reshape(self.nkv, self.dk)
            v = v.reshape(self.nkv, self.dv)
            if p + "attn_q_norm.weight" in self.t:
                q = np.stack([self.norm(r, self.t[p + "attn_q_norm.weight"]) for r in q])
                k = np.stack([self.norm(r, self.t[p + "attn_k_norm.weight"]) for r in k])
            q, k = self.rope(q, pos), self.rope(k, pos)
            cache[il].append((k, v))
            lo = 0
            if self.is_swa(il):
                lo = max(0, pos + 1 - self.window)
            ks = np.stack([c[0] for c in cache[il][lo:]])  # [n, nkv, dk]
            vs = np.stack([c[1] for c in cache[il][lo:]])
            group = self.nh // self.nkv
            out = np.zeros((self.nh, self.dv))
            sinks = self.t.get(p + "attn_sinks.weight")
            for hd in range(self.nh):
                kvh = hd // group
                sc = ks[:, kvh, :] @ q[hd] * self.scale
                if self.attn_cap:
                    sc = self.attn_cap * np.tanh(sc / self.attn_cap)
                m = sc.max() if sinks is None else max(sc.max(), sinks[hd])
                e = np.exp(sc - m)
                denom = e.sum() + (0.0 if sinks is None else math.exp(sinks[hd] - m))
                out[hd] = (e / denom) @ vs[:, kvh, :]
            out = out.reshape(-1)
            if gate is not None:
                out = out / (1 + np.exp(-gate))
            o = self.lin(p + "attn_output", out)
            if not (self.oss or self.qwen35) and p + "post_attention_norm.weight" in self.t:
                o = self.norm(o, self.t[p + "post_attention_norm.weight"])
            x = x + o
            ffn_norm = "post_attention_norm" if self.oss or self.qwen35 else "ffn_norm"
            h = self.norm(x, self.t[p + ffn_norm + ".weight"])
            if p + "ffn_gate_inp.weight" in self.t:
                f = self.moe(p, h)
            else:
                if p + "ffn_gate.weight" in self.t:
                    gate, up = self.lin(p + "ffn_gate", h), self.lin(p + "ffn_up", h)
                else:
                    gu = self.lin(p + "ffn_up", h)
                    gate, up = gu[: len(gu) // 2], gu[len(gu) // 2 :]
                f = self.lin(p + "ffn_down", self.glu(gate, up))
            if p + "post_ffw_norm.weight" in self.t:
                f = self.norm(f, self.t[p + "post_ffw_norm.weight"])
            x = x + f
        return self.norm(x, self.t["output_norm.weight"])


    def mtp_step(self, token, h_prev, pos, cache):
        """The MTP head (llama.cpp's qwen35 graph_mtp) at `pos`: `token` beside
        `h_prev`, the trunk's hidden state after the output norm at `pos - 1`.
        Returns its logits (the token after next) and its own normed hidden
        state."""
        p = f"blk.{self.n_layer}."
        e = self.t.get(p + "nextn.embed_tokens.weight", self.t["token_embd.weight"])[token]
        both = np.concatenate([self.norm(e, self.t[p + "nextn.enorm.weight"]),
                               self.norm(h_prev, self.t[p + "nextn.hnorm.weight"])])
        x = self.lin(p + "nextn.eh_proj", both)
        h = self.norm(x, self.t[p + "attn_norm.weight"])
        qg = self.lin(p + "attn_q", h).reshape(self.nh, 2 * self.dk)
        q, gate = qg[:, : self.dk].reshape(-1), qg[:, self.dk :].reshape(-1)
        k, v = self.lin(p + "attn_k", h), self.lin(p + "attn_v", h)
        q = np.stack([self.norm(r, self.t[p + "attn_q_norm.weight"]) for r in q.reshape(self.nh, self.dk)])
        k = np.stack([self.norm(r, self.t[p + "attn_k_norm.weight"]) for r in k.reshape(self.nkv, self.dk)])
        v = v.reshape(self.nkv, self.dv)
        q, k = self.rope(q, pos), self.rope(k, pos)
        cache.append((k, v))
        ks, vs = np.stack([c[0] for c in cache]), np.stack([c[1] for c in cache])
        group = self.nh // self.nkv
        out = np.zeros((self.nh, self.dv))
        for hd in range(self.nh):
            sc = ks[:, hd // group, :] @ q[hd] * self.scale
            w = np.exp(sc - sc.max())
            out[hd] = (w / w.sum()) @ vs[:, hd // group, :]
        out = out.reshape(-1) / (1 + np.exp(-gate))
        x = x + self.lin(p + "attn_output", out)
        hf = self.norm(x, self.t[p + "post_attention_norm.weight"])
        x = x + self.lin(p + "ffn_down", self.glu(self.lin(p + "ffn_gate", hf), self.lin(p + "ffn_up", hf)))
        hn = self.norm(x, self.t.get(p + "nextn.shared_head_norm.weight", self.t["output_norm.weight"]))
        head = self.t.get(p + "nextn.shared_head_head.weight",
                          self.t.get("output.weight", self.t["token_embd.weight"]))
        return head @ hn, hn


def log_softmax(z):
    m = z.max()
    return z - m - math.log(np.exp(z - m).sum())


def run(model, prompt_ids):
    cache = [[] for _ in range(model.n_layer)]
    for pos, t in enumerate(prompt_ids):
        logits = model.step(t, pos, cache)
    ids, top5 = [], []
    pos = len(prompt_ids)
    for _ in range(STEPS):
        lp = log_softmax(logits)
        order = np.argsort(-lp, kind="stable")[:5]
        top5.append([{"id": int(i), "logprob": float(lp[i])} for i in order])
        nxt = int(order[0])
        ids.append(nxt)
        logits = model.step(nxt, pos, cache)
        pos += 1
    return ids, top5


def perplexity(model, tokens, ctx, bos):
    """llama-perplexity's chunks: the running perplexity after each."""
    nll, count, running = 0.0, 0, []
    first = ctx // 2
    for k in range(len(tokens) // ctx):
        chunk = tokens[k * ctx : (k + 1) * ctx]
        run_ids = ([bos] if bos is not None else chunk[:1]) + chunk[1:]
        cache = [[] for _ in range(model.n_layer)]
        for pos in range(ctx - 1):
            logits = model.step(run_ids[pos], pos, cache)
            if pos >= first:
                nll -= float(log_softmax(logits)[chunk[pos + 1]])
                count += 1
        running.append(math.exp(nll / count))
        print(f"[{k + 1}]{running[-1]:.6f}", file=sys.stderr, flush=True)
    return running


class Bert:
    """A BERT encoder (src/models/bert.cpp): token, type-0 and position
    embeddings, a layer norm, post-norm layers of bidirectional attention and a
    tanh-GELU feed-forward, every map with its bias. nomic-bert: no position
    embeddings but NeoX rotary queries and keys, a fused QKV, and a SwiGLU
    feed-forward without biases."""

    def __init__(self, path):
        r = GGUFReader(path)
        self.t = {}
        for t in r.tensors:
            w = dequantize(t.data, t.tensor_type).astype(np.float64)
            shape = [int(x) for x in t.shape]
            self.t[t.name] = w.reshape(list(reversed(shape))) if len(shape) > 1 else w.reshape(-1)
        f = r.fields
        a = f["general.architecture"].contents()
        self.n_layer = int(f[a + ".block_count"].contents())
        self.heads = int(f[a + ".attention.head_count"].contents())
        self.eps = float(f[a + ".attention.layer_norm_epsilon"].contents())
        self.base = float(f[a + ".rope.freq_base"].contents()) if a + ".rope.freq_base" in f else 10000.0

    def rope(self, x):
        """NeoX rotation of every head of x [heads, n, hd] by its position."""
        hd = x.shape[-1]
        half = hd // 2
        w = self.base ** (-2.0 * np.arange(half) / hd)
        th = np.arange(x.shape[1])[:, None] * w[None, :]
        c, s = np.cos(th), np.sin(th)
        a, b = x[..., :half], x[..., half:]
        return np.concatenate([a * c - b * s, a * s + b * c], axis=-1)

    def ln(self, x, name):
        mu = x.mean(axis=-1, keepdims=True)
        var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
        return (x - mu) / np.sqrt(var + self.eps) * self.t[name + ".weight"] + self.t[name + ".bias"]

    def lin(self, name, x):
        y = x @ self.t[name + ".weight"].T
        return y + self.t[name + ".bias"] if name + ".bias" in self.t else y

    def rows(self, ids):
        """Every token's last-layer state."""
        t = self.t
        x = t["token_embd.weight"][ids]
        if "position_embd.weight" in t:
            x = x + t["position_embd.weight"][: len(ids)]
        if "token_types.weight" in t:
            x = x + t["token_types.weight"][0]
        x = self.ln(x, "token_embd_norm")
        n, d = x.shape
        hd = d // self.heads
        gelu = lambda g: 0.5 * g * (1 + np.tanh(math.sqrt(2 / math.pi) * (g + 0.044715 * g**3)))
        for il in range(self.n_layer):
            p = f"blk.{il}."
            heads = lambda y: y.reshape(n, self.heads, hd).transpose(1, 0, 2)
            if p + "attn_qkv.weight" in t:
                q, k, v = (heads(y) for y in np.split(self.lin(p + "attn_qkv", x), 3, axis=-1))
            else:
                q, k, v = (heads(self.lin(p + m, x)) for m in ("attn_q", "attn_k", "attn_v"))
            if "position_embd.weight" not in t:
                q, k = self.rope(q), self.rope(k)
            s = q @ k.transpose(0, 2, 1) / math.sqrt(hd)
            s = np.exp(s - s.max(axis=-1, keepdims=True))
            a = (s / s.sum(axis=-1, keepdims=True)) @ v
            x = self.ln(x + self.lin(p + "attn_output", a.transpose(1, 0, 2).reshape(n, d)), p + "attn_output_norm")
            if p + "ffn_gate.weight" in t:
                g = x @ t[p + "ffn_gate.weight"].T
                f = (g / (1 + np.exp(-g)) * (x @ t[p + "ffn_up.weight"].T)) @ t[p + "ffn_down.weight"].T
            else:
                f = self.lin(p + "ffn_down", gelu(self.lin(p + "ffn_up", x)))
            x = self.ln(x + f, p + "layer_output_norm")
        return list(x)

    def rank(self, ids):
        """The classification head's score of the first token's state."""
        h = self.rows(ids)[0]
        if "cls.weight" in self.t:
            h = np.tanh(self.lin("cls", h))
        return float(self.lin("cls.output", h)[0])


def embed(model, prompt_ids, pooling):
    """The prompt's hidden states pooled (none: every token's), unnormalized."""
    if isinstance(model, Bert):
        if pooling == "rank":
            return [[model.rank(prompt_ids)]]
        rows = model.rows(prompt_ids)
    else:
        cache = [[] for _ in range(model.n_layer)]
        rows = [model.trunk(t, pos, cache) for pos, t in enumerate(prompt_ids)]
    pooled = {"mean": lambda: [np.mean(rows, axis=0)], "cls": lambda: [rows[0]],
              "last": lambda: [rows[-1]], "none": lambda: rows}[pooling]()
    return [[float(v) for v in r] for r in pooled]


def embed_main(args):
    pooling = args.pop(args.index("--embed") + 1)
    args.remove("--embed")
    path, prompts, out = args
    arch = GGUFReader(path).fields["general.architecture"].contents()
    model = Bert(path) if arch in ("bert", "nomic-bert") else Model(path)
    with open(prompts) as f, open(out, "w") as o:
        for line in f:
            row = json.loads(line)
            e = embed(model, row["prompt_ids"], pooling)
            o.write(json.dumps({"prompt": row["prompt"], "prompt_ids": row["prompt_ids"],
                                "pooling": pooling, "embedding": e}) + "\n")


def perplexity_main(args):
    ctx = int(args.pop(args.index("--perplexity") + 1))
    args.remove("--perplexity")
    bos = None
    if "--bos" in args:
        bos = int(args.pop(args.index("--bos") + 1))
        args.remove("--bos")
    path, tokens_path, out = args
    with open(tokens_path) as f:
        tokens = json.load(f)
    running = perplexity(Model(path), tokens, ctx, bos)
    with open(out, "w") as o:
        json.dump({"ctx": ctx, "bos": bos, "running": running, "ppl": running[-1]}, o)
        o.write("\n")


def mtp_main(args):
    """`--mtp FILE GOLDEN OUT`: the MTP head's top-5 at every position of each
    golden row's prompt and greedy continuation, each token beside the trunk's
    hidden state at the position before it (zeros before the first)."""
    path, golden, out = [a for a in args if a != "--mtp"]
    model = Model(path)
    with open(golden) as f, open(out, "w") as o:
        for line in f:
            row = json.loads(line)
            tokens = row["prompt_ids"] + row["ids"]
            cache = [[] for _ in range(model.n_layer)]
            hidden = [model.trunk(t, pos, cache) for pos, t in enumerate(tokens)]
            head_cache, top5 = [], []
            for pos, t in enumerate(tokens):
                h_prev = hidden[pos - 1] if pos > 0 else np.zeros(model.d)
                logits, _ = model.mtp_step(t, h_prev, pos, head_cache)
                lp = log_softmax(logits)
                order = np.argsort(-lp, kind="stable")[:5]
                top5.append([{"id": int(i), "logprob": float(lp[i])} for i in order])
            o.write(json.dumps({"tokens": tokens, "top5": top5}) + "\n")


def main():
    args = sys.argv[1:]
    if "--mtp" in args:
        return mtp_main(args)
    if "--perplexity" in args:
        return perplexity_main(args)
    if "--embed" in args:
        return embed_main(args)
    context = None
    if "--context" in args:
        i = args.index("--context")
        context = int(args[i + 1])
        del args[i : i + 2]
    path, prompts, out = args
    model = Model(path, context)
    with open(prompts) as f, open(out, "w") as o:
        for line in f:
            row = json.loads(line)
            ids, top5 = run(model, row["prompt_ids"])
            o.write(json.dumps({"prompt": row["prompt"], "prompt_ids": row["prompt_ids"], "ids": ids, "top5": top5}) + "\n")


if __name__ == "__main__":
    main()
