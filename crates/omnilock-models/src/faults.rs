//! The faults the queue models inject, each with a budget: how many times
//! it may happen in one run. Each may happen at any step, in any order with
//! the other steps, so the checker tries every moment for each.

/// How many of each fault one run may see.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Faults {
    /// A live holder's lease runs out (its renewal failed: a network cut,
    /// a long pause). A crashed holder's lease runs out as well, without
    /// counting against this budget: that is the crash's consequence.
    pub expiries: u8,
    /// A client stops for good at any step: a waiter leaves its entry in
    /// the queue, a holder stops renewing and never releases.
    pub crashes: u8,
    /// A waiting acquire is dropped (a timeout, a `select!`, an aborted
    /// task) and runs its clean-up.
    pub cancels: u8,
    /// A request is applied twice: a retry after an answer was lost.
    pub duplicates: u8,
}

impl Faults {
    /// No faults at all.
    pub const NONE: Faults = Faults {
        expiries: 0,
        crashes: 0,
        cancels: 0,
        duplicates: 0,
    };

    /// Takes one `expiries`; `false` when none is left.
    pub(crate) fn take_expiry(&mut self) -> bool {
        take(&mut self.expiries)
    }

    /// Takes one `crashes`; `false` when none is left.
    pub(crate) fn take_crash(&mut self) -> bool {
        take(&mut self.crashes)
    }

    /// Takes one `cancels`; `false` when none is left.
    pub(crate) fn take_cancel(&mut self) -> bool {
        take(&mut self.cancels)
    }

    /// Takes one `duplicates`; `false` when none is left.
    pub(crate) fn take_duplicate(&mut self) -> bool {
        take(&mut self.duplicates)
    }
}

fn take(budget: &mut u8) -> bool {
    if *budget == 0 {
        return false;
    }
    *budget -= 1;
    true
}
