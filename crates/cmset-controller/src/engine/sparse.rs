//! Maps that give their room back. A `HashMap` keeps the capacity of its largest size after its entries
//! are removed, so a burst of sets, come and gone, would leave every per-set table at its peak size for
//! the life of the process (measured: 3.8 MiB of heap kept on the leader after 2,000 sets were created
//! and deleted). Each map keyed by a watched object shrinks once it has emptied to a quarter of its
//! capacity: the check is O(1) per removal, and a shrink, O(entries), comes at most once per halving.
//! The index's per-set lists (the readers under a set) follow the same rule.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasher, Hash};

/// Below this capacity a map is never shrunk: small tables are not worth the rehash.
const FLOOR: usize = 64;

pub trait ShrinkIfSparse {
    /// Shrinks to twice the entries when the entries fill less than a quarter of the capacity.
    fn shrink_if_sparse(&mut self);
}

fn sparse(len: usize, capacity: usize) -> bool {
    capacity > FLOOR && len * 4 < capacity
}

impl<K: Eq + Hash, V, S: BuildHasher> ShrinkIfSparse for HashMap<K, V, S> {
    fn shrink_if_sparse(&mut self) {
        if sparse(self.len(), self.capacity()) {
            self.shrink_to(self.len() * 2);
        }
    }
}

impl<K: Eq + Hash, S: BuildHasher> ShrinkIfSparse for HashSet<K, S> {
    fn shrink_if_sparse(&mut self) {
        if sparse(self.len(), self.capacity()) {
            self.shrink_to(self.len() * 2);
        }
    }
}

impl<T> ShrinkIfSparse for Vec<T> {
    fn shrink_if_sparse(&mut self) {
        if sparse(self.len(), self.capacity()) {
            self.shrink_to(self.len() * 2);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_map_emptied_to_a_quarter_gives_its_room_back_and_a_full_one_keeps_it() {
        let mut map: HashMap<usize, [u8; 64]> = (0..4096).map(|i| (i, [0; 64])).collect();
        let peak = map.capacity();
        for i in 0..2048 {
            map.remove(&i);
            map.shrink_if_sparse();
        }
        // (hashbrown counts a removed entry's slot out of the capacity until it is reused.)
        assert!(
            map.capacity() > peak * 3 / 4,
            "half full: kept ({} of {peak})",
            map.capacity()
        );
        for i in 2048..4000 {
            map.remove(&i);
            map.shrink_if_sparse();
        }
        assert!(map.capacity() < peak / 8, "96 left of {peak}: {}", map.capacity());
        assert_eq!(map.len(), 96);
        assert!((4000..4096).all(|i| map.contains_key(&i)), "no entry lost");
    }

    #[test]
    fn a_list_emptied_to_a_quarter_gives_its_room_back() {
        let mut list: Vec<usize> = (0..1000).collect();
        list.truncate(300);
        list.shrink_if_sparse();
        assert!(list.capacity() >= 1000, "more than a quarter left: kept");
        list.truncate(10);
        list.shrink_if_sparse();
        assert!(list.capacity() <= 20, "{}", list.capacity());
        assert_eq!(list, (0..10).collect::<Vec<_>>());
    }

    #[test]
    fn small_maps_are_left_alone() {
        let mut set: HashSet<usize> = (0..40).collect();
        set.retain(|i| *i < 2);
        let capacity = set.capacity();
        set.shrink_if_sparse();
        assert_eq!(set.capacity(), capacity);
    }
}
