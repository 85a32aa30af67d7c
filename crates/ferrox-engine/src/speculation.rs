//! Speculative decoding by prompt lookup (n-gram drafting; llama-server's
//! `--spec-type ngram-simple`): the tokens that followed the latest earlier
//! occurrence of a sequence's last `n` tokens are proposed as its next ones,
//! as many as the request's draft budget ([`next_budget`]) allows.
//! The worker runs the pending token and the draft as one span of the step
//! (logits on every row), then samples each row in turn exactly as plain
//! decoding would; a draft token is kept while it equals what was sampled.
//!
//! Invariants: the output is the output without speculation, token for token
//! and bit for bit, for greedy and sampled requests alike. Each row's logits
//! are the ones plain decoding computes (batch invariance, SPEC S3), the
//! sampler draws once per emitted token in the same order, and a draft token
//! is taken only when it is the token sampled. (For a sampled request this
//! is rejection sampling with a one-point draft: the draft survives with its
//! probability under the target, and otherwise the sample drawn is from the
//! target with the draft taken out.) Positions written for rejected drafts
//! are never read: the next step writes them again.

/// How speculation runs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Speculation {
    /// Most tokens drafted a step (llama-server's `--draft-max`): the cap of
    /// each request's draft budget ([`next_budget`]).
    pub max_draft: usize,
    /// A request's first draft budget (at most `max_draft`).
    pub first_draft: usize,
    /// The longest suffix looked up first, then shorter ones down to
    /// `min_ngram`.
    pub max_ngram: usize,
    pub min_ngram: usize,
    /// A draft is at most this many times as long as the match that found
    /// it (the suffix and the tokens before it that agree with the earlier
    /// occurrence): a long match is an answer copying its input, a short one
    /// is as often a chance repeat, and a refused row is a row of the step
    /// run for nothing.
    pub reach: f32,
    /// Speculation runs only while at most this many requests decode: on a
    /// full batch the step is already compute-bound, and drafted rows cost
    /// throughput.
    pub max_batch: usize,
    /// A draft model stops guessing for a request once its guess is less
    /// likely than this (llama-server's `--draft-p-min`): an unlikely guess
    /// is seldom kept, and each guess costs a pass of the draft.
    pub draft_p_min: f32,
    /// Most steps a request decodes without a draft model's or head's
    /// guesses after its drafts were refused whole ([`rest_after`]); 0:
    /// never rests.
    pub max_rest: usize,
}

impl Default for Speculation {
    fn default() -> Speculation {
        Speculation {
            max_draft: 32,
            first_draft: 8,
            max_ngram: 4,
            min_ngram: 2,
            reach: 1.5,
            max_batch: 4,
            draft_p_min: 0.75,
            max_rest: 16,
        }
    }
}

impl Speculation {
    /// A request's draft budget before its first draft.
    pub fn first_budget(&self) -> usize {
        self.first_draft.min(self.max_draft)
    }
}

/// A request's next draft budget after a draft of `drafted` tokens, made
/// within `budget`, kept `kept` of them: doubled (up to `max_draft`) when the
/// whole budget was drafted and kept, cut to one past what was kept (at least
/// 2, at most the budget it had) when a token was refused, and otherwise left. Long copies (an edit, a
/// quotation) thus draft long runs within a few steps, and text that does not
/// copy its input, where matches are chance, drafts short ones: a refused row
/// is a row of the step run for nothing.
pub fn next_budget(budget: usize, drafted: usize, kept: usize, s: &Speculation) -> usize {
    let next = if kept < drafted {
        (kept + 1).max(2).min(budget)
    } else if drafted > 0 && drafted >= budget {
        budget * 2
    } else {
        budget
    };
    next.min(s.max_draft)
}

/// Steps a request decodes without a draft model's or head's guesses after
/// `refused` drafts in a row were refused whole: none after one, then 1, 2,
/// 4, ... up to `max_rest`. Each guess costs a pass of the drafter, so a
/// drafter that is not right here (text unlike its training, a head of
/// random weights) costs a pass every few steps rather than every step; a
/// kept guess ends the rest.
pub fn rest_after(refused: u32, s: &Speculation) -> usize {
    match refused {
        0 | 1 => 0,
        n => (1usize << (n - 2).min(16)).min(s.max_rest),
    }
}

/// The draft for a sequence whose tokens so far are `tokens` then `pending`
/// (read in place, never copied): the tokens that followed the latest earlier
/// occurrence of its last `n` tokens, for the longest `n` from `max_ngram`
/// down to `min_ngram` that has one, at most `limit` of them and at most
/// `reach` times the match's length. Empty when none does.
pub fn draft(tokens: &[u32], pending: u32, s: &Speculation, limit: usize) -> Vec<u32> {
    let limit = limit.min(s.max_draft);
    if limit == 0 {
        return Vec::new();
    }
    for n in (s.min_ngram.max(1)..=s.max_ngram).rev() {
        if tokens.len() < n {
            continue;
        }
        // The suffix is `tail` then `pending`; an earlier occurrence lies
        // wholly in `tokens`, so it ends before the suffix does.
        let tail = &tokens[tokens.len() + 1 - n..];
        let found = tokens
            .windows(n)
            .rposition(|w| w[n - 1] == pending && &w[..n - 1] == tail);
        if let Some(at) = found {
            let longest = (s.reach * match_length(tokens, at, n, limit, s.reach) as f32) as usize;
            let limit = limit.min(longest.max(1));
            let from = at + n;
            let end = (from + limit).min(tokens.len());
            let mut out = tokens[from..end].to_vec();
            if out.len() < limit {
                // The followers run into the suffix's last token.
                out.push(pending);
            }
            return out;
        }
    }
    Vec::new()
}

/// The length of the match of the sequence's last `n` tokens (the last
/// `n - 1` of `tokens`, then the pending one) with `tokens[at..at + n]`, taken
/// back as far as the tokens before the two agree, and no further than a
/// length whose reach covers `limit`.
fn match_length(tokens: &[u32], at: usize, n: usize, limit: usize, reach: f32) -> usize {
    let enough = (limit as f32 / reach).ceil() as usize;
    // The tokens before the suffix end at tokens.len() - n + 1, those before
    // the occurrence at `at`.
    let before_suffix = &tokens[..tokens.len() + 1 - n];
    let agreeing = tokens[..at]
        .iter()
        .rev()
        .zip(before_suffix.iter().rev())
        .take(enough.saturating_sub(n))
        .take_while(|(a, b)| a == b)
        .count();
    n + agreeing
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(max_draft: usize) -> Speculation {
        Speculation {
            max_draft,
            ..Speculation::default()
        }
    }

    /// [`spec`] without the reach bound: the lookup alone.
    fn unbounded(max_draft: usize) -> Speculation {
        Speculation {
            reach: f32::INFINITY,
            ..spec(max_draft)
        }
    }

    /// [`draft`] of a whole history, its last token pending.
    fn of(history: &[u32], s: &Speculation, limit: usize) -> Vec<u32> {
        let (&pending, tokens) = history.split_last().unwrap();
        draft(tokens, pending, s, limit)
    }

    #[test]
    fn the_tokens_after_the_latest_match_of_the_longest_suffix_are_drafted() {
        // ... 1 2 3 4 5 6 ... 9 1 2 3 | the suffix 1 2 3 was followed by 4 5 6.
        let h = [7, 1, 2, 3, 4, 5, 6, 9, 1, 2, 3];
        assert_eq!(of(&h, &unbounded(8), 8), [4, 5, 6, 9, 1, 2, 3]);
        assert_eq!(of(&h, &unbounded(2), 8), [4, 5]);
        assert_eq!(of(&h, &unbounded(8), 3), [4, 5, 6]);
        // The latest occurrence wins: 2 3 was followed by 8 last time.
        let h = [2, 3, 4, 2, 3, 8, 5, 2, 3];
        assert_eq!(of(&h, &unbounded(8), 1), [8]);
        // Followers that reach the pending token include it.
        let h = [4, 5, 4, 5, 4, 5];
        assert_eq!(of(&h, &unbounded(8), 8), [4, 5]);
    }

    #[test]
    fn a_draft_reaches_half_again_as_far_as_its_match() {
        // 1 2 3 matched, 7 before one occurrence and 9 before the other: a
        // match of 3, a draft of 4.
        let h = [7, 1, 2, 3, 4, 5, 6, 9, 1, 2, 3];
        assert_eq!(of(&h, &spec(8), 8), [4, 5, 6, 9]);
        // 9 1 2 3 matched: 6.
        let h = [9, 1, 2, 3, 4, 5, 6, 8, 7, 9, 1, 2, 3];
        assert_eq!(of(&h, &spec(8), 8), [4, 5, 6, 8, 7, 9]);
        // The match runs back past the suffix while the tokens before both
        // agree (5 9 1 2 3: 5, a draft of 7), and the budget still bounds it.
        let h = [5, 9, 1, 2, 3, 4, 6, 6, 6, 6, 6, 6, 6, 6, 5, 9, 1, 2, 3];
        assert_eq!(of(&h, &spec(16), 16), [4, 6, 6, 6, 6, 6, 6]);
        assert_eq!(of(&h, &spec(16), 2), [4, 6]);
    }

    #[test]
    fn the_budget_doubles_on_a_whole_kept_draft_and_falls_to_what_was_kept() {
        let s = Speculation::default();
        assert_eq!(s.first_budget(), 8);
        // The whole budget drafted and kept: doubled, up to max_draft (32).
        assert_eq!(next_budget(8, 8, 8, &s), 16);
        assert_eq!(next_budget(16, 16, 16, &s), 32);
        assert_eq!(next_budget(32, 32, 32, &s), 32);
        // Fewer followers than the budget, all kept: nothing learned.
        assert_eq!(next_budget(16, 5, 5, &s), 16);
        assert_eq!(next_budget(16, 0, 0, &s), 16);
        // A refused token: one past what was kept, at least 2.
        assert_eq!(next_budget(32, 20, 11, &s), 12);
        assert_eq!(next_budget(16, 16, 0, &s), 2);
        // Never above the budget it had.
        assert_eq!(next_budget(2, 2, 1, &s), 2);
        let small = Speculation {
            max_draft: 1,
            ..Speculation::default()
        };
        assert_eq!(small.first_budget(), 1);
        assert_eq!(next_budget(1, 1, 1, &small), 1);
        assert_eq!(next_budget(1, 1, 0, &small), 1);
    }

    #[test]
    fn a_drafter_refused_whole_rests_longer_each_time_up_to_its_bound() {
        let s = Speculation::default();
        let rests: Vec<usize> = (0..9).map(|n| rest_after(n, &s)).collect();
        assert_eq!(rests, [0, 0, 1, 2, 4, 8, 16, 16, 16]);
        let never = Speculation { max_rest: 0, ..s };
        assert_eq!(rest_after(8, &never), 0);
    }

    #[test]
    fn no_match_or_no_room_drafts_nothing() {
        assert!(of(&[1, 2, 3, 4, 5], &spec(8), 8).is_empty());
        assert!(of(&[1, 2, 1, 2], &spec(8), 0).is_empty());
        assert!(of(&[1], &spec(8), 8).is_empty());
        // A one-token suffix is below min_ngram (2).
        assert!(of(&[5, 6, 7, 5], &spec(8), 8).is_empty());
    }
}
