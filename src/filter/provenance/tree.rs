//! Bloofi (§4–5): a B+-tree over the filters. Leaves are the filters; an
//! internal node holds the OR of its children, so a key its value misses is
//! in no filter below it and a query prunes whole subtrees. Order `d`:
//! internal nodes other than the root have `d..=2d` children (the root
//! 2..=2d), all of them leaves or all internal.
//!
//! - Insert: OR the filter into every node on the way down, going to the
//!   child nearest by Hamming distance; put the leaf beside its nearest
//!   sibling leaf; split a node with more than `2d` children (the last `d`
//!   go to a new node), up to the root.
//! - Saturation rule (§5.2): a node whose bits are all ones is never split;
//!   splitting it would only add a node every query still descends through.
//! - Delete: remove the leaf; an underflowing node borrows a child from a
//!   sibling with more than `d`, or merges into it; the ORs on the path are
//!   recomputed (bits cannot be cleared otherwise).
//! - Adding a key to a filter ORs its bits into the leaf and its ancestors.

use std::collections::HashMap;

use super::{Bits, SourceIndex};

const NONE: usize = usize::MAX;

#[derive(Clone, Debug)]
struct Node {
    val: Bits,
    children: Vec<usize>,
    parent: usize,
    /// The filter id of a leaf; `None` for an internal node.
    id: Option<u32>,
}

#[derive(Clone, Debug)]
pub struct Bloofi {
    m: usize,
    order: usize,
    saturation_rule: bool,
    nodes: Vec<Node>,
    /// Freed node indices, reused.
    free: Vec<usize>,
    root: usize,
    leaf_of: HashMap<u32, usize>,
}

impl Bloofi {
    /// An empty tree of order `order` (at least 2) over filters of `m` bits.
    pub fn new(m: usize, order: usize, saturation_rule: bool) -> Self {
        assert!(order >= 2, "Bloofi order must be at least 2");
        let root = Node { val: Bits::new(m), children: Vec::new(), parent: NONE, id: None };
        Bloofi { m, order, saturation_rule, nodes: vec![root], free: Vec::new(), root: 0, leaf_of: HashMap::new() }
    }

    /// The tree's height (1: the root holds the leaves).
    pub fn height(&self) -> usize {
        let (mut h, mut n) = (1, self.root);
        while let Some(&c) = self.nodes[n].children.first() {
            if self.is_leaf(c) {
                break;
            }
            h += 1;
            n = c;
        }
        h
    }

    fn is_leaf(&self, n: usize) -> bool {
        self.nodes[n].id.is_some()
    }

    fn alloc(&mut self, node: Node) -> usize {
        match self.free.pop() {
            Some(i) => {
                self.nodes[i] = node;
                i
            }
            None => {
                self.nodes.push(node);
                self.nodes.len() - 1
            }
        }
    }

    fn release(&mut self, n: usize) {
        // The bits stay allocated for reuse; the node is unreachable.
        self.nodes[n].children.clear();
        self.nodes[n].parent = NONE;
        self.nodes[n].id = None;
        self.free.push(n);
    }

    /// The child of `n` nearest to `bits` by Hamming distance (first on ties).
    fn nearest(&self, n: usize, bits: &Bits) -> Option<usize> {
        let children = &self.nodes[n].children;
        (0..children.len()).min_by_key(|&i| self.nodes[children[i]].val.hamming(bits))
    }

    /// Recomputes `n`'s value as the OR of its children.
    fn recompute(&mut self, n: usize) {
        let mut val = std::mem::replace(&mut self.nodes[n].val, Bits::new(0));
        val.clear();
        for &c in &self.nodes[n].children {
            val.or_with(&self.nodes[c].val);
        }
        self.nodes[n].val = val;
    }

    fn refresh_up(&mut self, mut n: usize) {
        while n != NONE {
            self.recompute(n);
            n = self.nodes[n].parent;
        }
    }

    fn split_if_needed(&mut self, n: usize) {
        if self.nodes[n].children.len() <= 2 * self.order {
            return;
        }
        if self.saturation_rule && self.nodes[n].val.all_ones() {
            return;
        }
        let at = self.nodes[n].children.len() - self.order;
        let moved = self.nodes[n].children.split_off(at);
        let sibling = self.alloc(Node { val: Bits::new(self.m), children: moved, parent: NONE, id: None });
        for i in 0..self.nodes[sibling].children.len() {
            let c = self.nodes[sibling].children[i];
            self.nodes[c].parent = sibling;
        }
        self.recompute(n);
        self.recompute(sibling);
        let parent = self.nodes[n].parent;
        if parent == NONE {
            let mut val = self.nodes[n].val.clone();
            val.or_with(&self.nodes[sibling].val);
            let root = self.alloc(Node { val, children: vec![n, sibling], parent: NONE, id: None });
            self.nodes[n].parent = root;
            self.nodes[sibling].parent = root;
            self.root = root;
        } else {
            self.nodes[sibling].parent = parent;
            let at = self.nodes[parent].children.iter().position(|&c| c == n).expect("child of its parent");
            self.nodes[parent].children.insert(at + 1, sibling);
            self.split_if_needed(parent);
        }
    }

    /// Restores the order invariants at `n` after it lost a child, then the
    /// ORs up to the root.
    fn fix_underflow(&mut self, n: usize) {
        if n == self.root {
            let only = self.nodes[n].children.first().copied();
            if self.nodes[n].children.len() == 1 && !self.is_leaf(only.expect("one child")) {
                let child = only.expect("one child");
                self.nodes[child].parent = NONE;
                self.root = child;
                self.release(n);
            } else {
                self.recompute(n);
            }
            return;
        }
        let parent = self.nodes[n].parent;
        if self.nodes[n].children.len() >= self.order || self.nodes[parent].children.len() < 2 {
            self.refresh_up(n);
            return;
        }
        let at = self.nodes[parent].children.iter().position(|&c| c == n).expect("child of its parent");
        let (sib, left) = if at > 0 {
            (self.nodes[parent].children[at - 1], true)
        } else {
            (self.nodes[parent].children[at + 1], false)
        };
        if self.nodes[sib].children.len() > self.order {
            // Borrow the sibling's child nearest to `n`.
            let c = if left {
                self.nodes[sib].children.pop().expect("children")
            } else {
                self.nodes[sib].children.remove(0)
            };
            if left {
                self.nodes[n].children.insert(0, c)
            } else {
                self.nodes[n].children.push(c)
            }
            self.nodes[c].parent = n;
            self.recompute(sib);
            self.refresh_up(n);
        } else {
            // Merge `n` into the sibling.
            let moved = std::mem::take(&mut self.nodes[n].children);
            for &c in &moved {
                self.nodes[c].parent = sib;
            }
            if left {
                self.nodes[sib].children.extend(moved);
            } else {
                self.nodes[sib].children.splice(0..0, moved);
            }
            self.nodes[parent].children.remove(at);
            self.release(n);
            self.recompute(sib);
            self.fix_underflow(parent);
        }
    }
}

impl SourceIndex for Bloofi {
    fn insert(&mut self, id: u32, bits: &Bits) {
        debug_assert!(!self.leaf_of.contains_key(&id) && bits.m() == self.m);
        let mut n = self.root;
        loop {
            self.nodes[n].val.or_with(bits);
            let children = &self.nodes[n].children;
            if children.is_empty() || self.is_leaf(children[0]) {
                let at = self.nearest(n, bits).map_or(0, |i| i + 1);
                let leaf = self.alloc(Node { val: bits.clone(), children: Vec::new(), parent: n, id: Some(id) });
                self.nodes[n].children.insert(at, leaf);
                self.leaf_of.insert(id, leaf);
                self.split_if_needed(n);
                return;
            }
            n = children[self.nearest(n, bits).expect("an internal node has children")];
        }
    }

    fn add_key(&mut self, id: u32, positions: &[usize]) -> u32 {
        let leaf = self.leaf_of[&id];
        let newly = super::set_counting(&mut self.nodes[leaf].val, positions);
        let mut n = self.nodes[leaf].parent;
        while n != NONE {
            positions.iter().for_each(|&p| self.nodes[n].val.set(p));
            n = self.nodes[n].parent;
        }
        newly
    }

    fn remove(&mut self, id: u32) -> bool {
        let Some(leaf) = self.leaf_of.remove(&id) else { return false };
        let parent = self.nodes[leaf].parent;
        self.nodes[parent].children.retain(|&c| c != leaf);
        self.release(leaf);
        self.fix_underflow(parent);
        true
    }

    fn query(&self, positions: &[usize], out: &mut Vec<u32>) -> u64 {
        let mut checked = 0;
        let mut stack = vec![self.root];
        while let Some(n) = stack.pop() {
            let node = &self.nodes[n];
            if node.children.is_empty() && node.id.is_none() {
                continue; // an empty root
            }
            checked += 1;
            if !node.val.contains(positions) {
                continue;
            }
            match node.id {
                Some(id) => out.push(id),
                None => stack.extend_from_slice(&node.children),
            }
        }
        checked
    }

    fn filter(&self, id: u32) -> Option<Bits> {
        self.leaf_of.get(&id).map(|&leaf| self.nodes[leaf].val.clone())
    }

    fn len(&self) -> usize {
        self.leaf_of.len()
    }

    fn memory_bytes(&self) -> usize {
        self.nodes.iter().map(|n| n.val.memory_bytes() + n.children.capacity() * 8 + 48).sum::<usize>()
            + self.leaf_of.len() * 16
    }
}

#[cfg(test)]
impl Bloofi {
    /// Checks every structural invariant; panics naming the broken one.
    pub(crate) fn check(&self) {
        let mut leaves = 0;
        let mut stack = vec![(self.root, NONE)];
        while let Some((n, parent)) = stack.pop() {
            let node = &self.nodes[n];
            assert_eq!(node.parent, parent, "node {n}: wrong parent");
            if node.id.is_some() {
                leaves += 1;
                continue;
            }
            let kids = node.children.len();
            if n != self.root && !(self.saturation_rule && node.val.all_ones()) {
                assert!(kids >= self.order, "node {n}: {kids} children, order {}", self.order);
                assert!(kids <= 2 * self.order, "node {n}: {kids} children, order {}", self.order);
            }
            let leafy = node.children.iter().filter(|&&c| self.nodes[c].id.is_some()).count();
            assert!(leafy == 0 || leafy == kids, "node {n}: mixed children");
            let mut or = Bits::new(self.m);
            for &c in &node.children {
                or.or_with(&self.nodes[c].val);
                stack.push((c, n));
            }
            assert_eq!(or, node.val, "node {n}: value is not the OR of its children");
        }
        assert_eq!(leaves, self.leaf_of.len());
    }
}
