//! Page-granular admission (SPEC S20-S25): pure arithmetic, capacities in,
//! decisions out; no allocation, no model.
//!
//! * [`PrefillPass`] (S20-S22): one step's prompt-token budget. Each admission is
//!   checked slot -> KV pages -> recurrent-state slots -> window seat -> a first
//!   chunk, cheapest first, against what earlier admissions of the same pass
//!   already took; a refusal changes nothing. A prompt is charged once, at its
//!   first chunk (S21); continuations only take tokens of the budget.
//! * [`chunk_len`] (S22): with a window pool, a chunk that is not a prompt's last
//!   ends on a page boundary; if not one whole page fits, nothing runs.
//! * [`decode_reserve_pages`] (S24): what a decoding request may still take.
//! * [`SlotTable`] (S25): request rows, last in first out, resized only while idle.

use crate::ledger::PageNeed;

/// Why a request is not admitted in this pass (it waits; nothing was taken).
#[derive(Copy, Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("no free request slot")]
    NoSlot,
    #[error("not enough KV pages for the remaining prompt and the output budget")]
    KvBudget,
    #[error("not enough recurrent-state slots")]
    RecurrentBudget,
    #[error("no window-pool seat")]
    WindowBudget,
    #[error("the pass's token budget does not reach a page boundary")]
    NoWholePage,
    #[error("the pass's token budget is spent")]
    BudgetSpent,
}

/// What the pools can still give when a pass starts (`None`: unbounded, or the
/// model has no such state).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct PassCapacity {
    pub slots: usize,
    pub kv_pages: Option<u64>,
    /// Requests the recurrent-state pool can still seat
    /// ([`crate::states::slots_per_request`] slots each).
    pub recurrent_seqs: Option<u64>,
    pub window_pages: Option<u64>,
}

/// A waiting request as admission sees it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// Prompt tokens to run (an empty prompt runs one, SPEC S6).
    pub prompt: usize,
    /// Prompt tokens the prefix cache already holds (whole pages, `< prompt`).
    pub hit: usize,
    /// Its pages, as the ledger prices them.
    pub need: PageNeed,
}

/// An admission: the request's first chunk runs in this pass.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Admitted {
    pub first_chunk: usize,
}

/// Where prompt chunks may end.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Chunking {
    /// Anywhere.
    Free,
    /// On page boundaries but for the prompt's last chunk (SPEC S22: a window
    /// pool, or the prefix cache).
    Pages,
    /// On page boundaries, the last chunk holding only the prompt's tail inside
    /// its last page: a hybrid model with the prefix cache, whose recurrent state
    /// is checkpointed at boundaries only, so the prompt's last one is reached.
    PagesThenTail,
    /// Whole prompts only: a chunk is the rest of the prompt, or nothing (an
    /// encoder's sequence runs in one pass).
    Whole,
}

/// Tokens of a chunk for a prompt with `prefilled` tokens run and `remaining` to
/// go, out of `budget` (SPEC S22), ending where `rule` allows; 0 if no such end
/// is reached.
pub fn chunk_len(
    prefilled: usize,
    remaining: usize,
    budget: usize,
    page_size: usize,
    rule: Chunking,
) -> usize {
    let take = remaining.min(budget);
    let boundary = ((prefilled + take) / page_size * page_size).saturating_sub(prefilled);
    match rule {
        Chunking::Free => take,
        Chunking::Pages if take == remaining => take,
        Chunking::Pages => boundary,
        Chunking::PagesThenTail if boundary > 0 => boundary,
        Chunking::PagesThenTail if take == remaining => take,
        Chunking::PagesThenTail => 0,
        Chunking::Whole if take == remaining => take,
        Chunking::Whole => 0,
    }
}

/// Full pages a decoding request may still take (SPEC S24): its remaining output
/// plus `page_size - 1` positions, since its next token may open a fresh page.
pub fn decode_reserve_pages(remaining_output: u64, page_size: usize) -> u64 {
    if remaining_output == 0 {
        return 0;
    }
    remaining_output.div_ceil(page_size as u64)
}

/// One step's prefill pass.
#[derive(Clone, Debug)]
pub struct PrefillPass {
    budget: usize,
    left: PassCapacity,
    page_size: usize,
    chunking: Chunking,
}

impl PrefillPass {
    /// A pass of `budget` prompt tokens over `capacity`, chunks ending where
    /// `chunking` allows.
    pub fn new(
        budget: usize,
        capacity: PassCapacity,
        page_size: usize,
        chunking: Chunking,
    ) -> Self {
        PrefillPass {
            budget,
            left: capacity,
            page_size,
            chunking,
        }
    }

    /// Prompt tokens the pass can still run.
    pub fn budget_left(&self) -> usize {
        self.budget
    }

    /// What the pools can still give.
    pub fn capacity_left(&self) -> PassCapacity {
        self.left
    }

    /// Admits `c` if every check passes, in order (S20), and charges its
    /// reservation and first chunk; a refusal leaves the pass as it was.
    pub fn admit(&mut self, c: &Candidate) -> Result<Admitted, Refusal> {
        if self.left.slots == 0 {
            return Err(Refusal::NoSlot);
        }
        let take = |left: Option<u64>, need: u64, why: Refusal| match left {
            Some(l) if l < need => Err(why),
            Some(l) => Ok(Some(l - need)),
            None => Ok(None),
        };
        let kv = take(self.left.kv_pages, c.need.kv_pages, Refusal::KvBudget)?;
        let recurrent = take(self.left.recurrent_seqs, 1, Refusal::RecurrentBudget)?;
        let window = take(
            self.left.window_pages,
            c.need.window_pages,
            Refusal::WindowBudget,
        )?;
        let first_chunk = chunk_len(
            c.hit,
            c.prompt - c.hit,
            self.budget,
            self.page_size,
            self.chunking,
        );
        if first_chunk == 0 {
            return Err(if self.budget == 0 {
                Refusal::BudgetSpent
            } else {
                Refusal::NoWholePage
            });
        }
        self.left = PassCapacity {
            slots: self.left.slots - 1,
            kv_pages: kv,
            recurrent_seqs: recurrent,
            window_pages: window,
        };
        self.budget -= first_chunk;
        Ok(Admitted { first_chunk })
    }

    /// The next chunk of an admitted prompt (S21: never refused by the gate that
    /// admitted it; it only takes budget, and may get 0 tokens this pass).
    pub fn continue_prompt(&mut self, prefilled: usize, remaining: usize) -> usize {
        let n = chunk_len(
            prefilled,
            remaining,
            self.budget,
            self.page_size,
            self.chunking,
        );
        self.budget -= n;
        n
    }
}

/// A fixed table of request rows (SPEC S25).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotTable {
    size: usize,
    /// Free rows; the last one given back is handed out first.
    free: Vec<usize>,
}

/// [`SlotTable::resize`] while rows are held.
#[derive(Copy, Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("request slots can be resized only while idle ({held} held)")]
pub struct SlotsBusy {
    pub held: usize,
}

impl SlotTable {
    /// `size` free rows; row 0 is handed out first.
    pub fn new(size: usize) -> SlotTable {
        SlotTable {
            size,
            free: (0..size).rev().collect(),
        }
    }

    /// Free rows.
    pub fn free(&self) -> usize {
        self.free.len()
    }

    /// Rows held.
    pub fn held(&self) -> usize {
        self.size - self.free.len()
    }

    /// Takes a row: the one given back last.
    pub fn take(&mut self) -> Option<usize> {
        self.free.pop()
    }

    /// Gives row `slot` back.
    pub fn give_back(&mut self, slot: usize) {
        assert!(
            slot < self.size && !self.free.contains(&slot),
            "row {slot} is not held"
        );
        self.free.push(slot);
    }

    /// Changes the number of rows; only while none is held.
    pub fn resize(&mut self, size: usize) -> Result<(), SlotsBusy> {
        match self.held() {
            0 => {
                *self = SlotTable::new(size);
                Ok(())
            }
            held => Err(SlotsBusy { held }),
        }
    }
}

#[cfg(test)]
mod tests;
