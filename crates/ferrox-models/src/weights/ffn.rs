//! The feed-forward weights of a layer: dense, routed experts (Qwen3-MoE,
//! gpt-oss), or Gemma 4's dense path and experts side by side.

use super::{BesideDense, Ffn, GatedFfn, Linear, Loader};
use crate::arch::{ArchSpec, Experts};
use crate::error::ModelError;
use crate::hparams::{HyperParams, MoeParams};

/// Layer `i`'s feed-forward.
pub(super) fn ffn_weights(
    l: &mut Loader<'_>,
    hp: &HyperParams,
    spec: &ArchSpec,
    i: usize,
) -> Result<Ffn, ModelError> {
    let n = |s: &str| format!("blk.{i}.{s}");
    let d = hp.n_embd;
    let Some(moe) = hp.moe else {
        return Ok(Ffn::Dense(Box::new(dense(l, spec, i, d, hp.layer_ff[i])?)));
    };
    if spec.experts == Experts::BesideDense {
        return beside_dense(l, hp, spec, i, &moe).map(|b| Ffn::BesideDense(Box::new(b)));
    }
    let (e, eff) = (moe.n_experts, moe.n_ff_expert);
    let biased = spec.experts == Experts::TopKSoftmax;
    let gates = l.experts(&n("ffn_gate_exps"), d, eff, e, biased)?;
    let ups = l.experts(&n("ffn_up_exps"), d, eff, e, biased)?;
    let downs = l.experts(&n("ffn_down_exps"), eff, d, e, biased)?;
    Ok(Ffn::Experts {
        router: l.linear(&n("ffn_gate_inp"), d, e)?,
        experts: gated(gates, ups, downs),
    })
}

/// Each expert's gate, up and down maps together.
fn gated(gates: Vec<Linear>, ups: Vec<Linear>, downs: Vec<Linear>) -> Vec<GatedFfn> {
    gates
        .into_iter()
        .zip(ups)
        .zip(downs)
        .map(|((gate, up), down)| GatedFfn { gate, up, down })
        .collect()
}

/// `ffn_gate`, `ffn_up` (or Phi-3's fused gate-up `ffn_up`) and `ffn_down`.
fn dense(
    l: &mut Loader<'_>,
    spec: &ArchSpec,
    i: usize,
    d: usize,
    ff: usize,
) -> Result<GatedFfn, ModelError> {
    let n = |s: &str| format!("blk.{i}.{s}");
    let [gate, up] = if spec.fused_gate_up {
        l.split(&n("ffn_up"), d, [ff, ff])?
    } else {
        [
            l.linear(&n("ffn_gate"), d, ff)?,
            l.linear(&n("ffn_up"), d, ff)?,
        ]
    };
    Ok(GatedFfn {
        gate,
        up,
        down: l.linear(&n("ffn_down"), ff, d)?,
    })
}

/// Gemma 4's dense path and experts, the experts' gate and up either apart or
/// fused per expert (`ffn_gate_up_exps`: each expert's gate rows, then its up
/// rows).
fn beside_dense(
    l: &mut Loader<'_>,
    hp: &HyperParams,
    spec: &ArchSpec,
    i: usize,
    moe: &MoeParams,
) -> Result<BesideDense, ModelError> {
    let n = |s: &str| format!("blk.{i}.{s}");
    let w = |s: &str| n(&format!("{s}.weight"));
    let (d, e, eff) = (hp.n_embd, moe.n_experts, moe.n_ff_expert);
    let (gates, ups): (Vec<Linear>, Vec<Linear>) = if l.has(&w("ffn_gate_up_exps")) {
        l.experts(&n("ffn_gate_up_exps"), d, 2 * eff, e, false)?
            .into_iter()
            .map(|f| {
                (
                    Linear::new(f.weight.rows(0, eff), None),
                    Linear::new(f.weight.rows(eff, eff), None),
                )
            })
            .unzip()
    } else {
        (
            l.experts(&n("ffn_gate_exps"), d, eff, e, false)?,
            l.experts(&n("ffn_up_exps"), d, eff, e, false)?,
        )
    };
    let downs = l.experts(&n("ffn_down_exps"), eff, d, e, false)?;
    Ok(BesideDense {
        dense: dense(l, spec, i, d, hp.layer_ff[i])?,
        dense_post_norm: l.vector(&w("post_ffw_norm_1"), d)?,
        experts_pre_norm: l.vector(&w("pre_ffw_norm_2"), d)?,
        router: l.linear(&n("ffn_gate_inp"), d, e)?,
        router_scale: l.vector(&n("ffn_gate_inp.scale"), d)?,
        experts: gated(gates, ups, downs),
        expert_scales: l.optional_vector(&n("ffn_down_exps.scale"), e)?,
        experts_post_norm: l.vector(&w("post_ffw_norm_2"), d)?,
    })
}
