//! Pure scheduling policy: which waiting requests to admit and what each step runs.
//! State in, decision out; no locks, channels or clocks.
//!
//! * Admission (SPEC S8, S9): first in, first out with head-of-line blocking; a
//!   request is admitted only while both the request-slot cap and the free blocks
//!   allow it. A head that does not fit stops admission, however small the ones
//!   behind it (no starvation of large requests).
//! * Steps (SPEC S2): every decoding row takes one token every step; prompts are
//!   prefilled in chunks from a per-step token budget, handed out round-robin from a
//!   rotating start, so several long prompts still cost decodes at most one budget
//!   per step and a long prompt cannot starve a short one behind it. Decode rows are
//!   ordered by request id (SPEC S24).

use crate::request::RequestId;

/// How many requests at the head of `waiting` (their block needs, in queue order)
/// to admit, given `running` requests of `max_seqs` and `free_blocks` (`None`: no
/// block budget).
pub fn admit_count(
    waiting: &[u64],
    running: usize,
    max_seqs: usize,
    free_blocks: Option<u64>,
) -> usize {
    let mut free = free_blocks;
    let mut n = 0;
    for &need in waiting {
        if running + n >= max_seqs {
            break;
        }
        match free {
            Some(f) if need > f => break,
            Some(f) => free = Some(f - need),
            None => {}
        }
        n += 1;
    }
    n
}

/// A prompt still being prefilled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Prefilling {
    pub id: RequestId,
    /// Prompt tokens not yet run.
    pub remaining: usize,
}

/// What one step runs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StepPlan {
    /// Rows taking a decode step, by id.
    pub decode: Vec<RequestId>,
    /// Prompt chunks: (request, tokens this step).
    pub prefill: Vec<(RequestId, usize)>,
}

/// Plans one step: every decoding row, plus up to `budget` prompt tokens shared
/// round-robin among `prefilling` (in admission order) starting at `cursor`.
pub fn plan_step(
    decoding: &[RequestId],
    prefilling: &[Prefilling],
    budget: usize,
    cursor: usize,
) -> StepPlan {
    let mut decode = decoding.to_vec();
    decode.sort_unstable();
    let mut prefill = Vec::new();
    let mut left = budget;
    let n = prefilling.len();
    for k in 0..n {
        if left == 0 {
            break;
        }
        let p = prefilling[(cursor + k) % n];
        let take = p.remaining.min(left);
        if take > 0 {
            prefill.push((p.id, take));
            left -= take;
        }
    }
    StepPlan { decode, prefill }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SPEC S9: a head request that does not fit holds the line.
    #[test]
    fn a_head_request_that_does_not_fit_holds_the_line() {
        assert_eq!(admit_count(&[5, 1, 1], 0, 8, Some(4)), 0);
        assert_eq!(admit_count(&[2, 2, 1], 0, 8, Some(4)), 2);
    }

    /// SPEC S8: the request-slot cap and the block budget both bind.
    #[test]
    fn the_two_caps_compose() {
        assert_eq!(admit_count(&[1, 1, 1], 1, 2, Some(100)), 1, "slots bind");
        assert_eq!(admit_count(&[3, 3, 3], 0, 8, Some(7)), 2, "blocks bind");
        assert_eq!(
            admit_count(&[1_000_000; 3], 0, 8, None),
            3,
            "no budget configured admits everything"
        );
    }

    /// SPEC S2: decodes always run; prompts share one budget round-robin.
    #[test]
    fn decodes_always_run_and_prompts_share_one_budget_round_robin() {
        let pre = [
            Prefilling {
                id: 7,
                remaining: 1000,
            },
            Prefilling {
                id: 9,
                remaining: 3,
            },
        ];
        let p0 = plan_step(&[4, 2], &pre, 16, 0);
        assert_eq!(
            p0,
            StepPlan {
                decode: vec![2, 4],
                prefill: vec![(7, 16)]
            }
        );
        let p1 = plan_step(&[4, 2], &pre, 16, 1);
        assert_eq!(
            p1.prefill,
            vec![(9, 3), (7, 13)],
            "the short prompt behind is not starved"
        );
        let total: usize = p1.prefill.iter().map(|p| p.1).sum();
        assert!(total <= 16);
    }
}
