//! The ledger and the prefix cache (SPEC S7, S20, S23, S24), no model loaded.

use super::*;
use crate::admission::decode_reserve_pages;

fn ledger(full: u64, window: Option<(usize, u64)>) -> KvLedger {
    KvLedger::new(LedgerConfig {
        page_size: 4,
        full_pages: Some(full),
        window: window.map(|w| w.0),
        window_pages: window.map(|w| w.1),
        max_span: 8,
        prefix_cache: true,
        states: None,
    })
}

/// Admits `id` for `prompt` plus `max_tokens`, runs its whole prompt in chunks of
/// `chunk` and returns its hit in tokens.
fn run_prompt(l: &mut KvLedger, id: u64, prompt: &[u32], max_tokens: usize, chunk: usize) -> usize {
    let hit = l.lookup(prompt);
    let need = l.need((prompt.len() + max_tokens) as u64, &hit);
    assert!(l.kv_available().is_none_or(|a| a >= need.kv_pages));
    l.admit(id, need, &hit).unwrap();
    let mut at = hit.tokens(4);
    while at < prompt.len() {
        let end = (at + chunk).min(prompt.len());
        l.prepare(id, at, end).unwrap();
        l.advance(id, &prompt[..end]);
        at = end;
    }
    hit.tokens(4)
}

fn prompt(n: usize, salt: u32) -> Vec<u32> {
    (0..n as u32).map(|i| i * 7 + salt).collect()
}

/// SPEC S20: a repeated prompt shares the full pages of the first, leaving at
/// least one token to run, and its reservation shrinks by the hit.
#[test]
fn a_repeated_prompt_shares_its_pages_and_leaves_a_token_to_run() {
    let mut l = ledger(64, None);
    let p = prompt(18, 0);
    assert_eq!(run_prompt(&mut l, 1, &p, 4, 8), 0);
    let hit = l.lookup(&p);
    assert_eq!(hit.tokens(4), 16, "4 whole pages; 2 tokens left to run");
    assert_eq!(&hit.full[..], &l.table(1).unwrap().full[..4]);
    assert_eq!(hit.evictable, 0, "request 1 still holds them");
    let need = l.need(22, &hit);
    assert_eq!((need.owed, need.kv_pages), (6 - 4, 2));
    // Exactly a page multiple: the last page is not taken, one token must run.
    assert_eq!(l.lookup(&p[..16]).tokens(4), 12);
    let mut other = p.clone();
    other[9] += 1;
    assert_eq!(l.lookup(&other).tokens(4), 8, "up to the page that differs");
}

/// SPEC S7, S20: KV available is free plus evictable minus what running requests
/// are owed; locking evictable hit pages is charged.
#[test]
fn available_pages_are_free_plus_evictable_minus_promises() {
    let mut l = ledger(16, None);
    let p = prompt(16, 3);
    run_prompt(&mut l, 1, &p, 8, 8);
    assert_eq!(l.table(1).unwrap().full.len(), 4);
    assert_eq!(
        l.kv_available(),
        Some(16 - 4 - 2),
        "2 pages still owed for the output"
    );
    l.release(1);
    assert_eq!((l.kv_available(), l.full_evictable()), (Some(16), 4));
    let hit = l.lookup(&prompt(17, 3));
    assert_eq!((hit.full.len(), hit.evictable), (4, 4));
    let need = l.need(17 + 4, &hit);
    assert_eq!((need.owed, need.kv_pages), (2, 6), "2 new pages + 4 locked");
    l.admit(2, need, &hit).unwrap();
    assert_eq!(l.kv_available(), Some(16 - 6));
    l.release(2);
    assert_eq!(l.kv_available(), Some(16));
}

/// Unreferenced cached pages stay until room is needed, then go least recently
/// released first; pages a running request shares are never evicted.
#[test]
fn cached_pages_are_evicted_lru_only_when_needed_and_shared_ones_are_locked() {
    let mut l = ledger(8, None);
    let (a, b) = (prompt(8, 100), prompt(8, 200));
    run_prompt(&mut l, 1, &a, 1, 8);
    l.release(1);
    run_prompt(&mut l, 2, &b, 1, 8);
    l.release(2);
    assert_eq!((l.full_evictable(), l.cached_pages()), (4, 4));
    // A 12-position request with nothing to share: 3 pages. 4 are never used,
    // so nothing is evicted yet.
    run_prompt(&mut l, 3, &prompt(11, 300), 1, 12);
    assert_eq!(l.counters().evictions, 0);
    // Lock b's pages by sharing them, then ask for more room than is free.
    let hit = l.lookup(&prompt(9, 200));
    assert_eq!(hit.tokens(4), 8);
    l.admit(4, l.need(9, &hit), &hit).unwrap();
    run_prompt(&mut l, 5, &prompt(8, 400), 0, 8);
    assert_eq!(l.counters().evictions, 1, "one page of a evicted");
    assert_eq!(
        l.lookup(&prompt(9, 100)).tokens(4),
        4,
        "a's deeper page went first"
    );
    assert_eq!(
        l.lookup(&prompt(9, 200)).tokens(4),
        8,
        "b's shared pages are locked"
    );
}

/// A hit on a window model needs the window pages of the last `window`
/// positions before it, so it is cut back to what both pools hold.
#[test]
fn a_window_hit_is_cut_back_to_what_both_pools_hold() {
    // Window 6, pages of 4: a hit of n pages needs window pages from
    // (4n + 1 - 6) / 4 to n.
    let mut l = ledger(64, Some((6, 64)));
    let p = prompt(30, 0);
    run_prompt(&mut l, 1, &p, 1, 8);
    assert_eq!(l.window_held(1), 2, "pages 6 and 7 cover positions 24..30");
    l.release(1);
    // Pages slid past were kept by the cache (SPEC S23): all 7 whole pages hit.
    let hit = l.lookup(&p);
    assert_eq!(
        (hit.tokens(4), hit.window_from, hit.window.len()),
        (28, 5, 2)
    );
    // Drop the window page of page 5 from the cache: the hit must stop before
    // anything that needs it.
    let w5 = l.index.entry(hit.full[5]).unwrap().window.unwrap();
    l.index.detach_window(w5);
    l.window.forget(w5);
    let cut = l.lookup(&p);
    assert_eq!(
        cut.tokens(4),
        20,
        "pages 0..5 need window pages 3 and 4 only"
    );
    assert_eq!((cut.window_from, cut.window.len()), (3, 2));
}

/// SPEC S23: a long windowed prompt gives back the window pages it has slid
/// past after each chunk, so it never holds more than its seat; the cache keeps
/// the ones it has entered.
#[test]
fn a_long_windowed_prompt_reclaims_the_window_pages_it_slid_past() {
    let mut l = ledger(256, Some((6, 8)));
    let seat = window_pages_per_request(6, 8, 4);
    assert_eq!(seat, 5);
    let p = prompt(200, 1);
    let hit = l.lookup(&p);
    let need = l.need(201, &hit);
    assert_eq!(need.window_pages, seat);
    l.admit(1, need, &hit).unwrap();
    let mut at = 0;
    while at < p.len() {
        let end = (at + 8).min(p.len());
        l.prepare(1, at, end).unwrap();
        assert!(
            l.window_held(1) as u64 <= seat,
            "at {at}: {}",
            l.window_held(1)
        );
        l.advance(1, &p[..end]);
        at = end;
    }
    assert_eq!(l.window_available(), Some(8 - seat));
    assert_eq!(
        l.window.evictable() as usize + l.window_held(1),
        8,
        "slid-past pages stay cached (until evicted for the next ones)"
    );
    // Without the prefix cache they are freed instead.
    let mut cold = KvLedger::new(LedgerConfig {
        prefix_cache: false,
        ..l.cfg.clone()
    });
    run_prompt(&mut cold, 1, &p, 1, 8);
    assert_eq!(cold.window.evictable(), 0);
    assert!(cold.window_held(1) as u64 <= seat);
}

/// SPEC S7, S24: whatever mix of hits, chunk sizes, output lengths and ends, a
/// request admitted by the promises never runs out of pages, decoding requests
/// owe at most their remaining output plus `page_size - 1` positions, and every
/// page and promise comes back. Throughout, a follower of the prefix cache's
/// events (vLLM's KV events) holds exactly the hashes the cache holds.
#[test]
fn nothing_admitted_ever_runs_out_of_pages() {
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut rand = |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    for window in [None, Some((6, 40))] {
        let mut l = ledger(40, window).recording_events();
        let mut view = std::collections::BTreeSet::new();
        // (id, tokens, prompt + max_tokens, written)
        let mut live: Vec<(u64, Vec<u32>, usize, usize)> = Vec::new();
        for id in 0..400u64 {
            crate::kv_events::apply(&mut view, &l.take_events());
            let cached: std::collections::BTreeSet<u64> = l.cached_hashes().into_iter().collect();
            assert_eq!(view, cached, "the events' view of the cache");
            if rand(3) > 0 && !live.is_empty() {
                let i = rand(live.len() as u64) as usize;
                let (lid, p, total, written) = &mut live[i];
                let total = *total;
                let step = if *written < p.len() {
                    1 + rand(8) as usize
                } else {
                    1
                };
                let end = (*written + step)
                    .min(p.len().max(*written + 1))
                    .min(total - 1);
                if end <= *written {
                    l.release(*lid);
                    live.swap_remove(i);
                    continue;
                }
                l.prepare(*lid, *written, end)
                    .expect("promised pages are there");
                while p.len() < end {
                    p.push(rand(3) as u32);
                }
                l.advance(*lid, &p[..end]);
                *written = end;
                if *written >= p.len() {
                    let remaining = (total - *written) as u64;
                    let s = &l.seqs[lid];
                    assert!(s.owed <= decode_reserve_pages(remaining, 4));
                }
                continue;
            }
            let p: Vec<u32> = (0..1 + rand(30)).map(|_| rand(2) as u32).collect();
            let max = 1 + rand(12) as usize;
            let hit = l.lookup(&p);
            let need = l.need((p.len() + max) as u64, &hit);
            let fits = l.kv_available().unwrap() >= need.kv_pages
                && l.window_available().is_none_or(|w| w >= need.window_pages);
            if fits {
                l.admit(id, need, &hit).unwrap();
                let total = p.len() + max;
                live.push((id, p, total, hit.tokens(4)));
            }
        }
        for (id, ..) in live {
            l.release(id);
        }
        assert!(
            l.counters().evictions > 0,
            "the events were followed through evictions"
        );
        assert_eq!((l.full_in_use(), l.kv_available()), (0, Some(40)));
        assert_eq!(l.window_available(), window.map(|w| w.1));
    }
}

/// Two requests that arrive together with the same long prompt compute it once:
/// the second takes the pages the first wrote since it was admitted, and the
/// promises still balance.
#[test]
fn a_prompt_in_prefill_catches_up_with_pages_written_meanwhile() {
    let mut l = ledger(64, None);
    let p = prompt(40, 5);
    for id in [1, 2] {
        let hit = l.lookup(&p);
        assert!(hit.full.is_empty());
        l.admit(id, l.need(44, &hit), &hit).unwrap();
    }
    l.prepare(1, 0, 24).unwrap();
    l.advance(1, &p[..24]);
    assert_eq!(
        l.catch_up(2, &p, 0).prefilled,
        24,
        "six pages written by request 1"
    );
    assert_eq!(l.table(2).unwrap().full, l.table(1).unwrap().full);
    assert_eq!(l.catch_up(2, &p, 24).prefilled, 24, "nothing new");
    assert_eq!(
        l.catch_up(1, &p, 24).prefilled,
        24,
        "its own pages are no news"
    );
    l.prepare(2, 24, 40).unwrap();
    l.advance(2, &p[..40]);
    assert_eq!(
        l.catch_up(1, &p, 24).prefilled,
        36,
        "and back: request 2 went ahead"
    );
    l.release(1);
    l.release(2);
    assert_eq!((l.kv_available(), l.full_in_use()), (Some(64), 0));
    // Not mid-page, and not on window models.
    let mut w = ledger(64, Some((6, 64)));
    let hit = w.lookup(&p);
    w.admit(3, w.need(44, &hit), &hit).unwrap();
    assert_eq!(w.catch_up(3, &p, 0).prefilled, 0);
}
