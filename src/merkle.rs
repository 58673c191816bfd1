//! The Merkle tree of a collection's witness, as RFC 6962 (Certificate
//! Transparency) defines it: a leaf is SHA-256 of `0x00 || data`, a node SHA-256
//! of `0x01 || left || right`, a tree of n > 1 leaves splits at the largest power
//! of two below n, and the empty tree's hash is SHA-256 of nothing. An inclusion
//! proof is the audit path of RFC 6962 §2.1.1, checked as RFC 9162 §2.1.3.2 says.
//! ARCHITECTURE.md ("The witness") gives the leaf data and the order.

use sha2::{Digest, Sha256};

/// A node of the tree.
pub type Hash = [u8; 32];

/// The hash of a leaf holding `data`.
pub fn leaf_hash(data: &[u8]) -> Hash {
    Sha256::new().chain_update([0u8]).chain_update(data).finalize().into()
}

fn node_hash(left: &Hash, right: &Hash) -> Hash {
    Sha256::new().chain_update([1u8]).chain_update(left).chain_update(right).finalize().into()
}

/// The largest power of two below `n` (n > 1).
fn split(n: usize) -> usize {
    1 << (usize::BITS - 1 - (n - 1).leading_zeros())
}

/// The root over `leaves` (leaf hashes, in order).
pub fn root(leaves: &[Hash]) -> Hash {
    match leaves.len() {
        0 => Sha256::digest([]).into(),
        1 => leaves[0],
        n => {
            let k = split(n);
            node_hash(&root(&leaves[..k]), &root(&leaves[k..]))
        }
    }
}

/// The root over leaves given one at a time, in order, holding only the roots of
/// the perfect subtrees not yet joined (one per bit of the count): the same root as
/// `root` over all of them, in memory that does not grow with the collection.
#[derive(Debug, Default, Clone)]
pub struct Builder {
    /// Perfect subtrees, largest (leftmost) first, with their leaf counts.
    pending: Vec<(Hash, u64)>,
    count: u64,
}

impl Builder {
    pub fn push(&mut self, leaf: Hash) {
        let mut node = (leaf, 1);
        while let Some(&(left, size)) = self.pending.last() {
            if size != node.1 {
                break;
            }
            self.pending.pop();
            node = (node_hash(&left, &node.0), size * 2);
        }
        self.pending.push(node);
        self.count += 1;
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    /// The root of the leaves pushed so far: the perfect subtrees joined right to
    /// left, as RFC 6962 splits a tree at the largest power of two below its size.
    pub fn root(&self) -> Hash {
        let mut subtrees = self.pending.iter().rev();
        let Some(&(mut hash, _)) = subtrees.next() else { return Sha256::digest([]).into() };
        for (left, _) in subtrees {
            hash = node_hash(left, &hash);
        }
        hash
    }
}

/// The audit path of leaf `index` (from the leaf up); `None` when out of range.
pub fn proof(leaves: &[Hash], index: usize) -> Option<Vec<Hash>> {
    if index >= leaves.len() {
        return None;
    }
    let mut path = Vec::new();
    let (mut lo, mut hi, mut at) = (0, leaves.len(), index);
    let mut siblings = Vec::new();
    while hi - lo > 1 {
        let k = split(hi - lo);
        if at < k {
            siblings.push(root(&leaves[lo + k..hi]));
            hi = lo + k;
        } else {
            siblings.push(root(&leaves[lo..lo + k]));
            lo += k;
            at -= k;
        }
    }
    path.extend(siblings.into_iter().rev());
    Some(path)
}

/// Whether `path` proves that `leaf` is leaf `index` of a tree of `size` leaves with this `root`.
pub fn check(leaf: &Hash, index: u64, size: u64, path: &[Hash], root: &Hash) -> bool {
    if index >= size {
        return false;
    }
    let (mut fnode, mut snode, mut hash) = (index, size - 1, *leaf);
    for sibling in path {
        if snode == 0 {
            return false;
        }
        if fnode & 1 == 1 || fnode == snode {
            hash = node_hash(sibling, &hash);
            while fnode & 1 == 0 && fnode != 0 {
                fnode >>= 1;
                snode >>= 1;
            }
        } else {
            hash = node_hash(&hash, sibling);
        }
        fnode >>= 1;
        snode >>= 1;
    }
    snode == 0 && hash == *root
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(hash: &Hash) -> String {
        hex::encode(hash)
    }

    /// The leaves of the Certificate Transparency test vectors (RFC 6962's reference code).
    fn ct_leaves() -> Vec<Hash> {
        let data: [&[u8]; 8] = [
            b"",
            b"\x00",
            b"\x10",
            b"\x20\x21",
            b"\x30\x31",
            b"\x40\x41\x42\x43",
            b"\x50\x51\x52\x53\x54\x55\x56\x57",
            b"\x60\x61\x62\x63\x64\x65\x66\x67\x68\x69\x6a\x6b\x6c\x6d\x6e\x6f",
        ];
        data.iter().map(|d| leaf_hash(d)).collect()
    }

    #[test]
    fn known_answers_of_certificate_transparency() {
        assert_eq!(hex(&root(&[])), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
        assert_eq!(hex(&root(&ct_leaves()[..1])), "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d");
        assert_eq!(hex(&root(&ct_leaves())), "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328");
    }

    #[test]
    fn the_builder_gives_the_root_of_every_size() {
        let leaves: Vec<Hash> = (0..70u32).map(|i| leaf_hash(&i.to_be_bytes())).collect();
        let mut builder = Builder::default();
        assert_eq!(builder.root(), root(&[]));
        for (n, leaf) in leaves.iter().enumerate() {
            builder.push(*leaf);
            assert_eq!(builder.root(), root(&leaves[..=n]), "{} leaves", n + 1);
            assert_eq!(builder.count(), n as u64 + 1);
        }
    }

    #[test]
    fn every_proof_checks_and_a_wrong_leaf_fails() {
        let leaves = ct_leaves();
        for size in 1..=leaves.len() {
            let tree = &leaves[..size];
            let top = root(tree);
            for index in 0..size {
                let path = proof(tree, index).unwrap();
                assert!(check(&tree[index], index as u64, size as u64, &path, &top), "{index} of {size}");
                let other = leaf_hash(b"another bag");
                assert!(!check(&other, index as u64, size as u64, &path, &top));
            }
        }
    }
}
