// SPDX-License-Identifier: GPL-2.0

//! The records of the page tables our revocable pins hold, and what a new
//! pin's table address says about them (rust/nvidia/held.rs keeps them
//! under a lock and gives the reasoning).  Two live tables never share an
//! address, so a record at the address of a table just handed to a new pin
//! of ours names a pin the driver released without our put or callback.

/// One revocable pin of ours.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record {
    /// Its page table's address.
    pub table: usize,
    /// Its free callback's `data` (unique among live pins).
    pub data: usize,
    /// A newer pin of ours got `table` since: this pin was released.
    pub released: bool,
}

impl Record {
    /// The record of a pin just made.
    pub const fn new(table: usize, data: usize) -> Self {
        Record {
            table,
            data,
            released: false,
        }
    }
}

/// A new pin of ours got `table`: every record at that address is marked
/// released.
pub fn mark_reused(records: &mut [Record], table: usize) {
    for r in records.iter_mut().filter(|r| r.table == table) {
        r.released = true;
    }
}

/// Where the record of the pin armed with `data` is.
pub fn find(records: &[Record], data: usize) -> Option<usize> {
    records.iter().position(|r| r.data == data)
}

/// Where the record of the pin armed with `data` is, if that pin was
/// released under us.
pub fn find_released(records: &[Record], data: usize) -> Option<usize> {
    find(records, data).filter(|&i| records[i].released)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_pin_at_a_held_address_marks_only_that_record() {
        let mut r = [Record::new(0x1000, 1), Record::new(0x2000, 2)];
        mark_reused(&mut r, 0x1000);
        assert_eq!(find_released(&r, 1), Some(0));
        assert_eq!(find_released(&r, 2), None);
        assert_eq!(find(&r, 2), Some(1));
    }

    #[test]
    fn an_address_no_record_holds_marks_nothing() {
        let mut r = [Record::new(0x1000, 1)];
        mark_reused(&mut r, 0x3000);
        assert_eq!(find_released(&r, 1), None);
        assert_eq!(find(&r, 7), None);
        assert_eq!(find_released(&r, 7), None);
    }

    #[test]
    fn the_new_pins_own_record_is_not_marked() {
        // The caller marks before it adds the new pin's record.
        let mut r = [Record::new(0x1000, 1), Record::new(0x1000, 2)];
        mark_reused(&mut r[..1], 0x1000);
        assert_eq!(find_released(&r, 2), None);
        assert_eq!(find_released(&r, 1), Some(0));
    }
}
