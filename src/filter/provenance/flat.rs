//! Flat-Bloofi (Bloofi §6): the filters bit-sliced, 64 to a group. In a
//! group, word `i` holds bit `i` of each of its 64 filters (bit `j` of the
//! word is filter slot `j`), so a query ANDs the k words at the key's
//! positions, one group at a time: at most `k·⌈N/64⌉` word reads, whatever
//! the filters hold.

use std::collections::HashMap;

use super::{Bits, SourceIndex};

/// Slots per group: the bits of a word.
const SLOTS: usize = 64;

#[derive(Clone, Debug)]
pub struct FlatBloofi {
    m: usize,
    /// Per group `m` words; `None` once every slot of the group is free
    /// (deleting its last filter drops the array).
    groups: Vec<Option<Vec<u64>>>,
    /// Per group, the slots in use.
    used: Vec<u64>,
    slot_of: HashMap<u32, usize>,
    id_of: Vec<u32>,
}

impl FlatBloofi {
    pub fn new(m: usize) -> Self {
        FlatBloofi { m, groups: Vec::new(), used: Vec::new(), slot_of: HashMap::new(), id_of: Vec::new() }
    }

    /// A free slot, reusing the lowest one (a new group when all are taken).
    fn free_slot(&mut self) -> usize {
        let group = match self.used.iter().position(|&u| u != u64::MAX) {
            Some(g) => g,
            None => {
                self.groups.push(None);
                self.used.push(0);
                self.id_of.resize(self.used.len() * SLOTS, u32::MAX);
                self.used.len() - 1
            }
        };
        if self.groups[group].is_none() {
            self.groups[group] = Some(vec![0; self.m]);
        }
        group * SLOTS + (!self.used[group]).trailing_zeros() as usize
    }
}

impl SourceIndex for FlatBloofi {
    fn insert(&mut self, id: u32, bits: &Bits) {
        debug_assert!(!self.slot_of.contains_key(&id) && bits.m() == self.m);
        let slot = self.free_slot();
        let (g, j) = (slot / SLOTS, slot % SLOTS);
        self.used[g] |= 1 << j;
        self.slot_of.insert(id, slot);
        self.id_of[slot] = id;
        let words = self.groups[g].as_mut().expect("the slot's group exists");
        for (wi, &w) in bits.words().iter().enumerate() {
            let mut w = w;
            while w != 0 {
                words[wi * 64 + w.trailing_zeros() as usize] |= 1 << j;
                w &= w - 1;
            }
        }
    }

    fn add_key(&mut self, id: u32, positions: &[usize]) -> u32 {
        let slot = self.slot_of[&id];
        let (g, bit) = (slot / SLOTS, 1u64 << (slot % SLOTS));
        let words = self.groups[g].as_mut().expect("the slot's group exists");
        let mut newly = 0;
        for &p in positions {
            newly += u32::from(words[p] & bit == 0);
            words[p] |= bit;
        }
        newly
    }

    fn remove(&mut self, id: u32) -> bool {
        let Some(slot) = self.slot_of.remove(&id) else { return false };
        let (g, j) = (slot / SLOTS, slot % SLOTS);
        self.used[g] &= !(1 << j);
        self.id_of[slot] = u32::MAX;
        if self.used[g] == 0 {
            self.groups[g] = None;
        } else if let Some(words) = self.groups[g].as_mut() {
            words.iter_mut().for_each(|w| *w &= !(1 << j));
        }
        true
    }

    fn query(&self, positions: &[usize], out: &mut Vec<u32>) -> u64 {
        let mut reads = 0;
        for (g, words) in self.groups.iter().enumerate() {
            let Some(words) = words else { continue };
            let mut hits = self.used[g];
            for &p in positions {
                reads += 1;
                hits &= words[p];
                if hits == 0 {
                    break;
                }
            }
            while hits != 0 {
                out.push(self.id_of[g * SLOTS + hits.trailing_zeros() as usize]);
                hits &= hits - 1;
            }
        }
        reads
    }

    fn filter(&self, id: u32) -> Option<Bits> {
        let slot = *self.slot_of.get(&id)?;
        let words = self.groups[slot / SLOTS].as_ref()?;
        let mut bits = Bits::new(self.m);
        for (i, w) in words.iter().enumerate() {
            if w >> (slot % SLOTS) & 1 == 1 {
                bits.set(i);
            }
        }
        Some(bits)
    }

    fn len(&self) -> usize {
        self.slot_of.len()
    }

    fn memory_bytes(&self) -> usize {
        self.groups.iter().flatten().map(|g| g.len() * 8).sum::<usize>()
            + self.id_of.len() * 4
            + self.slot_of.len() * 16
    }
}
