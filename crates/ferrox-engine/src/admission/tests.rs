//! SPEC S20-S25 on the pure admission arithmetic, no model loaded.

use super::*;

fn cap(slots: usize, kv: u64, recurrent: Option<u64>, window: Option<u64>) -> PassCapacity {
    PassCapacity {
        slots,
        kv_pages: Some(kv),
        recurrent_seqs: recurrent,
        window_pages: window,
    }
}

fn cand(prompt: usize, hit: usize, kv: u64, window: u64) -> Candidate {
    Candidate {
        prompt,
        hit,
        need: PageNeed {
            owed: kv,
            kv_pages: kv,
            window_pages: window,
        },
    }
}

/// SPEC S20: each admission is charged against what earlier admissions of the
/// same pass took: slots, pages and the token budget.
#[test]
fn a_pass_charges_each_admission_against_the_ones_before_it() {
    let mut pass = PrefillPass::new(100, cap(3, 10, None, None), 16, Chunking::Free);
    assert_eq!(
        pass.admit(&cand(60, 0, 4, 0)),
        Ok(Admitted { first_chunk: 60 })
    );
    assert_eq!(pass.budget_left(), 40);
    assert_eq!(pass.capacity_left().kv_pages, Some(6));
    assert_eq!(
        pass.admit(&cand(70, 0, 4, 0)),
        Ok(Admitted { first_chunk: 40 }),
        "the rest of the budget, not a fresh one"
    );
    assert_eq!(
        pass.admit(&cand(5, 0, 3, 0)),
        Err(Refusal::KvBudget),
        "2 pages left"
    );
    assert_eq!(pass.admit(&cand(5, 0, 2, 0)), Err(Refusal::BudgetSpent));
}

/// SPEC S20: the checks run slot -> KV -> recurrent -> window, and a refusal
/// leaves the pass exactly as it was.
#[test]
fn checks_run_in_order_and_a_refusal_leaves_no_trace() {
    let everything_short = cand(10, 0, 50, 50);
    let reason =
        |c: PassCapacity| PrefillPass::new(100, c, 16, Chunking::Pages).admit(&everything_short);
    assert_eq!(reason(cap(0, 0, Some(0), Some(0))), Err(Refusal::NoSlot));
    assert_eq!(reason(cap(1, 0, Some(0), Some(0))), Err(Refusal::KvBudget));
    assert_eq!(
        reason(cap(1, 50, Some(0), Some(0))),
        Err(Refusal::RecurrentBudget)
    );
    assert_eq!(
        reason(cap(1, 50, Some(1), Some(49))),
        Err(Refusal::WindowBudget)
    );
    assert_eq!(
        reason(cap(1, 50, Some(1), Some(50))),
        Ok(Admitted { first_chunk: 10 })
    );

    let mut pass = PrefillPass::new(100, cap(2, 50, Some(1), Some(49)), 16, Chunking::Pages);
    let before = (pass.budget_left(), pass.capacity_left());
    assert_eq!(pass.admit(&everything_short), Err(Refusal::WindowBudget));
    assert_eq!((pass.budget_left(), pass.capacity_left()), before);
}

/// SPEC S20: a recurrent model's request takes a seat of recurrent-state
/// slots.
#[test]
fn a_recurrent_request_takes_a_seat_of_state_slots() {
    let mut pass = PrefillPass::new(100, cap(4, 50, Some(2), None), 16, Chunking::Free);
    assert!(pass.admit(&cand(5, 0, 1, 0)).is_ok());
    assert!(pass.admit(&cand(5, 0, 1, 0)).is_ok());
    assert_eq!(pass.capacity_left().recurrent_seqs, Some(0));
    assert_eq!(pass.admit(&cand(5, 0, 1, 0)), Err(Refusal::RecurrentBudget));
}

/// SPEC S20: a prefix hit removes its tokens from the prefill work.
#[test]
fn a_prefix_hit_is_not_prefilled_again() {
    let mut pass = PrefillPass::new(512, cap(1, 10, None, None), 16, Chunking::Free);
    assert_eq!(
        pass.admit(&cand(1000, 992, 1, 0)),
        Ok(Admitted { first_chunk: 8 })
    );
    assert_eq!(pass.budget_left(), 504);
}

/// SPEC S21: a prompt is charged once, at its first chunk; its continuations
/// take only budget and are never refused by the gate that admitted it.
#[test]
fn continuations_reserve_nothing_and_are_never_refused() {
    let mut pass = PrefillPass::new(64, cap(1, 4, None, Some(4)), 16, Chunking::Free);
    assert_eq!(
        pass.admit(&cand(200, 0, 4, 4)),
        Ok(Admitted { first_chunk: 64 })
    );
    let left = pass.capacity_left();
    assert_eq!(
        (left.slots, left.kv_pages, left.window_pages),
        (0, Some(0), Some(0))
    );
    // Next step: a fresh pass on what is left; the continuation still runs.
    let mut next = PrefillPass::new(64, left, 16, Chunking::Free);
    assert_eq!(next.continue_prompt(64, 136), 64);
    assert_eq!(next.capacity_left(), left, "nothing new reserved");
}

/// SPEC S22: with a window pool, a chunk that is not the prompt's last ends on a
/// page boundary, the last may end mid-page, and a prompt that cannot reach a
/// boundary runs nothing this pass.
#[test]
fn window_chunks_end_on_page_boundaries() {
    assert_eq!(
        chunk_len(0, 100, 40, 16, Chunking::Pages),
        32,
        "cut back to a boundary"
    );
    assert_eq!(chunk_len(32, 68, 40, 16, Chunking::Pages), 32);
    assert_eq!(
        chunk_len(64, 36, 40, 16, Chunking::Pages),
        36,
        "the last chunk ends mid-page"
    );
    assert_eq!(
        chunk_len(0, 100, 15, 16, Chunking::Pages),
        0,
        "not one whole page"
    );
    assert_eq!(
        chunk_len(0, 100, 15, 16, Chunking::Free),
        15,
        "no window pool: any length"
    );
    // A hybrid model with the prefix cache: the prompt's last page boundary is
    // a chunk end too, then the tail runs alone.
    let rule = Chunking::PagesThenTail;
    assert_eq!(
        chunk_len(0, 100, 512, 16, rule),
        96,
        "up to the last boundary"
    );
    assert_eq!(chunk_len(96, 4, 512, 16, rule), 4, "then the tail");
    assert_eq!(
        chunk_len(0, 10, 512, 16, rule),
        10,
        "a prompt inside one page"
    );
    assert_eq!(chunk_len(0, 100, 40, 16, rule), 32);
    assert_eq!(chunk_len(0, 100, 15, 16, rule), 0);

    let mut pass = PrefillPass::new(40, cap(2, 50, None, Some(50)), 16, Chunking::Pages);
    assert_eq!(
        pass.admit(&cand(100, 0, 7, 5)),
        Ok(Admitted { first_chunk: 32 })
    );
    assert_eq!(pass.admit(&cand(100, 0, 7, 5)), Err(Refusal::NoWholePage));
    assert_eq!(
        pass.continue_prompt(32, 68),
        0,
        "8 tokens left: no whole page"
    );
    assert_eq!(
        pass.admit(&cand(5, 0, 1, 1)),
        Ok(Admitted { first_chunk: 5 })
    );
}

/// SPEC S24: a decoding request reserves its remaining output plus
/// `page_size - 1` positions: its next token may open a fresh page.
#[test]
fn decode_reserves_remaining_output_plus_a_page_less_one() {
    assert_eq!(decode_reserve_pages(0, 16), 0);
    assert_eq!(
        decode_reserve_pages(1, 16),
        1,
        "the next token may open a page"
    );
    assert_eq!(decode_reserve_pages(16, 16), 1);
    assert_eq!(decode_reserve_pages(17, 16), 2);
}

/// SPEC S25: request rows are handed out last in, first out, and resized only
/// while idle.
#[test]
fn request_slots_are_lifo_and_resized_only_while_idle() {
    let mut t = SlotTable::new(3);
    assert_eq!((t.take(), t.take()), (Some(0), Some(1)));
    t.give_back(0);
    assert_eq!(t.take(), Some(0), "the row given back last comes first");
    assert_eq!(t.take(), Some(2));
    assert_eq!(t.take(), None);
    assert_eq!(t.resize(8), Err(SlotsBusy { held: 3 }));
    for s in [2, 1, 0] {
        t.give_back(s);
    }
    assert_eq!(t.resize(1), Ok(()));
    assert_eq!((t.free(), t.take(), t.take()), (1, Some(0), None));
}
