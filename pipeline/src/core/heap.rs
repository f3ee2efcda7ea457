//! Bytes a value keeps on the heap — capacities, not lengths, as the allocator sees them — so
//! that a loaded index can say where its memory goes (`Kb::memory`, the service's `/metrics`).
//! Hash tables are counted as hashbrown lays them out (a slot and a control byte per bucket);
//! what the allocator itself adds around each allocation is not counted.

use std::collections::HashMap;
use std::mem::size_of;

/// Heap bytes held by a value (its inline size is its owner's).
pub trait HeapSize {
    /// Bytes this value owns on the heap.
    fn heap_size(&self) -> usize;
}

macro_rules! no_heap {
    ($($t:ty),*) => { $(impl HeapSize for $t { fn heap_size(&self) -> usize { 0 } })* };
}
no_heap!(bool, u8, u32, u64, usize, i32, i64, f32, f64);

impl HeapSize for String {
    fn heap_size(&self) -> usize {
        self.capacity()
    }
}

impl<T: HeapSize> HeapSize for Option<T> {
    fn heap_size(&self) -> usize {
        self.as_ref().map_or(0, HeapSize::heap_size)
    }
}

impl<A: HeapSize, B: HeapSize> HeapSize for (A, B) {
    fn heap_size(&self) -> usize {
        self.0.heap_size() + self.1.heap_size()
    }
}

impl<T: HeapSize, const N: usize> HeapSize for [T; N] {
    fn heap_size(&self) -> usize {
        self.iter().map(HeapSize::heap_size).sum()
    }
}

impl<T: HeapSize> HeapSize for Vec<T> {
    fn heap_size(&self) -> usize {
        self.capacity() * size_of::<T>() + self.iter().map(HeapSize::heap_size).sum::<usize>()
    }
}

impl<K: HeapSize, V: HeapSize, S> HeapSize for HashMap<K, V, S> {
    fn heap_size(&self) -> usize {
        table_bytes::<(K, V)>(self.capacity()) + self.iter().map(|(k, v)| k.heap_size() + v.heap_size()).sum::<usize>()
    }
}

/// The table of a hash map of `capacity` entries of `T`: hashbrown keeps its buckets a power of
/// two at most 7/8 full (at least 4 buckets), each a `T` and a control byte, plus one group of
/// control bytes.
fn table_bytes<T>(capacity: usize) -> usize {
    if capacity == 0 {
        return 0;
    }
    let buckets = if capacity < 4 { 4 } else { (capacity * 8 / 7).next_power_of_two() };
    buckets * (size_of::<T>() + 1) + 16
}

/// Heap bytes of an Arrow array's buffers (their capacity).
pub fn arrow_size(array: &dyn arrow::array::Array) -> usize {
    array.get_buffer_memory_size()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_vectors_count_every_capacity() {
        let mut outer: Vec<Vec<u32>> = Vec::with_capacity(4);
        outer.push(Vec::with_capacity(10));
        outer.push(vec![1, 2, 3]);
        assert_eq!(outer.heap_size(), 4 * size_of::<Vec<u32>>() + 10 * 4 + 3 * 4);
    }

    #[test]
    fn a_map_counts_its_table_and_what_its_keys_and_values_hold() {
        let mut map: HashMap<String, Vec<u32>> = HashMap::new();
        assert_eq!(map.heap_size(), 0);
        map.insert("abc".to_owned(), vec![7; 5]);
        let table = table_bytes::<(String, Vec<u32>)>(map.capacity());
        assert!(table >= 4 * (size_of::<(String, Vec<u32>)>() + 1));
        assert_eq!(map.heap_size(), table + 3 + 5 * 4);
    }

    #[test]
    fn an_arrow_array_counts_its_buffers() {
        let strings = arrow::array::StringArray::from(vec!["a".repeat(1000)]);
        assert!(arrow_size(&strings) >= 1000 + 2 * 4);
    }
}
