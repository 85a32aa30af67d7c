//! The feed-forward weights of a layer: dense, routed experts (Qwen3-MoE,
//! gpt-oss), or Gemma 4's dense path and experts side by side.

use super::{BesideDense, Ffn, GatedFfn, Linear, Loader};
use crate::arch::Experts;
use crate::arch::tensors::{full_name, names as n};
use crate::error::ModelError;

/// Layer `i`'s feed-forward.
pub(super) fn ffn_weights(l: &Loader<'_>, i: usize) -> Result<Ffn, ModelError> {
    let t = |name: &str| full_name(name, Some(i));
    if l.hp.moe.is_none() {
        return Ok(Ffn::Dense(Box::new(dense(l, i)?)));
    }
    if l.hp.spec().experts == Experts::BesideDense {
        return beside_dense(l, i).map(|b| Ffn::BesideDense(Box::new(b)));
    }
    Ok(Ffn::Experts {
        router: l.linear(&t(n::FFN_GATE_INP))?,
        experts: gated(
            l.experts(&t(n::FFN_GATE_EXPS))?,
            l.experts(&t(n::FFN_UP_EXPS))?,
            l.experts(&t(n::FFN_DOWN_EXPS))?,
        ),
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

/// `ffn_gate`, `ffn_up` and `ffn_down`, or Phi-3's fused gate-up `ffn_up` (the
/// gate rows, then the up rows).
fn dense(l: &Loader<'_>, i: usize) -> Result<GatedFfn, ModelError> {
    let t = |name: &str| full_name(name, Some(i));
    let [gate, up] = match l.has(&t(n::FFN_GATE)) {
        true => [l.linear(&t(n::FFN_GATE))?, l.linear(&t(n::FFN_UP))?],
        false => {
            let ff = l.hp.ff_of(i);
            l.split(&t(n::FFN_UP), [ff, ff])?
        }
    };
    Ok(GatedFfn {
        gate,
        up,
        down: l.linear(&t(n::FFN_DOWN))?,
    })
}

/// Gemma 4's dense path and experts, the experts' gate and up either apart or
/// fused per expert (`ffn_gate_up_exps`: each expert's gate rows, then its up
/// rows).
fn beside_dense(l: &Loader<'_>, i: usize) -> Result<BesideDense, ModelError> {
    let t = |name: &str| full_name(name, Some(i));
    let (gates, ups): (Vec<Linear>, Vec<Linear>) = match l.has(&t(n::FFN_GATE_UP_EXPS)) {
        true => l
            .experts(&t(n::FFN_GATE_UP_EXPS))?
            .into_iter()
            .map(|f| {
                let eff = f.weight.rows / 2;
                (
                    Linear::new(f.weight.rows(0, eff), None),
                    Linear::new(f.weight.rows(eff, eff), None),
                )
            })
            .unzip(),
        false => (
            l.experts(&t(n::FFN_GATE_EXPS))?,
            l.experts(&t(n::FFN_UP_EXPS))?,
        ),
    };
    Ok(BesideDense {
        dense: dense(l, i)?,
        dense_post_norm: l.vector(&t(n::POST_FFW_NORM_1))?,
        experts_pre_norm: l.vector(&t(n::PRE_FFW_NORM_2))?,
        router: l.linear(&t(n::FFN_GATE_INP))?,
        router_scale: l.vector(&t(n::FFN_GATE_INP_SCALE))?,
        experts: gated(gates, ups, l.experts(&t(n::FFN_DOWN_EXPS))?),
        expert_scales: l.optional_vector(&t(n::FFN_DOWN_EXPS_SCALE))?,
        experts_post_norm: l.vector(&t(n::POST_FFW_NORM_2))?,
    })
}
