//! Pure scheduling policy: who is admitted in a pass and what each step runs.
//! State in, decision out; no locks, channels or clocks.
//!
//! * Admission (SPEC S8, S9): first in, first out with head-of-line blocking; the
//!   first candidate a [`PrefillPass`] refuses stops admission, however small the
//!   ones behind it (no starvation of large requests).
//! * Steps (SPEC S2): every decoding row takes one token every step, ordered by
//!   request id (S24). Prompt chunks share the pass's token budget round-robin from
//!   a rotating start; the waiting queue takes one turn of that rotation (it is
//!   served before the prompts in prefill on one pass out of `n + 1`), so several
//!   long prompts still cost decodes at most one budget per step and neither a long
//!   prompt in prefill nor a stream of arrivals can starve the other.

use crate::admission::{Admitted, Candidate, PrefillPass, Refusal};
use crate::request::RequestId;

/// What one pass's admission did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Admissions {
    /// The admitted candidates, in queue order.
    pub admitted: Vec<Admitted>,
    /// Why the first candidate left waiting was refused.
    pub waiting: Option<Refusal>,
}

/// Admits candidates in queue order until the pass refuses one (S9).
pub fn admit_fifo(pass: &mut PrefillPass, queue: &[Candidate]) -> Admissions {
    let mut admitted = Vec::new();
    for c in queue {
        match pass.admit(c) {
            Ok(a) => admitted.push(a),
            Err(why) => {
                return Admissions {
                    admitted,
                    waiting: Some(why),
                };
            }
        }
    }
    Admissions {
        admitted,
        waiting: None,
    }
}

/// A prompt still being prefilled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Prefilling {
    pub id: RequestId,
    /// Prompt tokens already run (or taken from the prefix cache).
    pub prefilled: usize,
    /// Prompt tokens not yet run.
    pub remaining: usize,
}

/// Whether the waiting queue is served first in the pass of step `cursor`, with
/// `n` prompts in prefill (its turn in the rotation).
pub fn admissions_first(cursor: usize, n: usize) -> bool {
    cursor % (n + 1) == n
}

/// The chunks of prompts in prefill (in admission order), shared round-robin from
/// `cursor`: `(request, tokens this step)`, those that get tokens only.
pub fn plan_continuations(
    pass: &mut PrefillPass,
    prefilling: &[Prefilling],
    cursor: usize,
) -> Vec<(RequestId, usize)> {
    let n = prefilling.len();
    let mut out = Vec::new();
    for k in 0..n {
        let p = prefilling[(cursor + k) % n];
        let take = pass.continue_prompt(p.prefilled, p.remaining);
        if take > 0 {
            out.push((p.id, take));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::{Chunking, PassCapacity};
    use crate::ledger::PageNeed;

    fn cand(prompt: usize, pages: u64) -> Candidate {
        Candidate {
            prompt,
            hit: 0,
            need: PageNeed {
                owed: pages,
                kv_pages: pages,
                window_pages: 0,
            },
        }
    }

    fn pass(slots: usize, pages: u64, budget: usize) -> PrefillPass {
        let cap = PassCapacity {
            slots,
            kv_pages: Some(pages),
            recurrent_seqs: None,
            window_pages: None,
        };
        PrefillPass::new(budget, cap, 16, Chunking::Free)
    }

    /// SPEC S9: a head request that does not fit holds the line.
    #[test]
    fn a_head_request_that_does_not_fit_holds_the_line() {
        let q = [cand(4, 5), cand(4, 1), cand(4, 1)];
        assert!(admit_fifo(&mut pass(8, 4, 512), &q).admitted.is_empty());
        let q = [cand(4, 2), cand(4, 2), cand(4, 1)];
        assert_eq!(admit_fifo(&mut pass(8, 4, 512), &q).admitted.len(), 2);
    }

    /// SPEC S8: the request-slot cap and the page budget both bind.
    #[test]
    fn the_two_caps_compose() {
        let q = [cand(1, 1), cand(1, 1), cand(1, 1)];
        assert_eq!(
            admit_fifo(&mut pass(1, 100, 512), &q).admitted.len(),
            1,
            "slots bind"
        );
        let q = [cand(1, 3), cand(1, 3), cand(1, 3)];
        assert_eq!(
            admit_fifo(&mut pass(8, 7, 512), &q).admitted.len(),
            2,
            "pages bind"
        );
        let mut unbounded = PrefillPass::new(
            512,
            PassCapacity {
                slots: 8,
                kv_pages: None,
                recurrent_seqs: None,
                window_pages: None,
            },
            16,
            Chunking::Free,
        );
        let q = [cand(1, 1_000_000), cand(1, 1_000_000), cand(1, 1_000_000)];
        assert_eq!(
            admit_fifo(&mut unbounded, &q).admitted.len(),
            3,
            "no budget configured"
        );
    }

    /// SPEC S2: prompts share one budget round-robin; the short prompt behind a
    /// long one is not starved, and the queue takes its turn.
    #[test]
    fn prompts_share_one_budget_round_robin() {
        let pre = [
            Prefilling {
                id: 7,
                prefilled: 0,
                remaining: 1000,
            },
            Prefilling {
                id: 9,
                prefilled: 0,
                remaining: 3,
            },
        ];
        let mut p = pass(8, 100, 16);
        assert_eq!(plan_continuations(&mut p, &pre, 0), vec![(7, 16)]);
        let mut p = pass(8, 100, 16);
        assert_eq!(
            plan_continuations(&mut p, &pre, 1),
            vec![(9, 3), (7, 13)],
            "the short prompt behind is not starved"
        );
        assert_eq!(p.budget_left(), 0);
        let turns: Vec<bool> = (0..6).map(|c| admissions_first(c, 2)).collect();
        assert_eq!(turns, [false, false, true, false, false, true]);
        assert!(
            admissions_first(0, 0),
            "with nothing in prefill the queue goes first"
        );
    }
}
