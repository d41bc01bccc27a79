//! memcached's slab classes, as numbers: inkcached allocates every item on its own, but reports
//! items by the class memcached would put them in (`stats items`, `stats slabs`, `stats
//! cachedump`, `me`, `lru_crawler metadump`), so that tools reading those see the same classes.
//!
//! The classes follow memcached's `slabs_init`: the first is `48 + -n` bytes, each next one
//! `-f` times larger (8-byte aligned) while below `slab_chunk_max / -f`, and the last is
//! `slab_chunk_max`; or the sizes of `-o slab_sizes`. An item's size is memcached's
//! `ITEM_ntotal` ([`inkproto::request::item_total`]).

use crate::config::Config;

/// memcached's `MAX_NUMBER_OF_SLAB_CLASSES`.
pub const MAX_CLASSES: usize = 64;

#[derive(Clone, Debug)]
pub struct Slabs {
    /// Chunk size per class id (index 0 unused).
    sizes: Vec<u32>,
    page_size: u32,
    item_size_max: usize,
}

impl Slabs {
    pub fn new(c: &Config) -> Self {
        let mut sizes = vec![0u32];
        let mut size = (48 + c.chunk_size.max(1)) as f64;
        let chunk_max = c.slab_chunk_max.max(1) as f64;
        let mut i = 0;
        while sizes.len() < MAX_CLASSES - 1 {
            let s = match &c.slab_sizes {
                Some(list) => match list.get(i) {
                    Some(&s) => f64::from(s),
                    None => break,
                },
                None if size >= chunk_max / c.factor => break,
                None => size,
            };
            let mut s = s as u32;
            if !s.is_multiple_of(8) {
                s += 8 - s % 8;
            }
            sizes.push(s);
            size = (f64::from(s) * c.factor) as u32 as f64;
            i += 1;
        }
        sizes.push(c.slab_chunk_max as u32);
        Slabs {
            sizes,
            page_size: c.slab_page_size as u32,
            item_size_max: c.item_size_max as usize,
        }
    }

    /// Class ids in use: 1..=largest.
    pub fn largest(&self) -> usize {
        self.sizes.len() - 1
    }

    pub fn chunk_size(&self, cls: usize) -> u32 {
        self.sizes[cls]
    }

    pub fn page_size(&self) -> u32 {
        self.page_size
    }

    pub fn per_page(&self, cls: usize) -> u32 {
        self.page_size / self.sizes[cls].max(1)
    }

    /// memcached's `slabs_clsid`: the class of an item of `ntotal` bytes (0 if too large).
    pub fn class_of(&self, ntotal: usize) -> usize {
        if ntotal == 0 || ntotal > self.item_size_max {
            return 0;
        }
        let l = self.largest();
        match self.sizes[1..].iter().position(|&s| ntotal <= s as usize) {
            Some(p) => p + 1,
            None => l,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_classes_match_memcached() {
        let s = Slabs::new(&Config::default());
        // memcached 1.6 with defaults: 96, 120, 152, 192, 240, ... 524288 as class 39 or so.
        assert_eq!(&s.sizes[1..6], &[96, 120, 152, 192, 240]);
        assert_eq!(s.chunk_size(s.largest()), 524288);
        assert_eq!(s.class_of(96), 1);
        assert_eq!(s.class_of(97), 2);
        assert_eq!(s.class_of(600_000), s.largest());
        assert_eq!(s.class_of(2 << 20), 0);
        assert_eq!(s.per_page(1), 10922);
    }
}
