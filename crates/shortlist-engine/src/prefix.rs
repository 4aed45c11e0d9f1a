//! Block-level prefix cache: KV blocks of fixed-size token runs, keyed by a chained hash, shared
//! between requests and evicted least-recently-used under a byte budget.
//!
//! A block's key hashes its tokens together with the key of the block before it, so a key names
//! a whole prefix, not just 16 tokens that could appear anywhere. Blocks keep their tokens and
//! parent key and are compared on lookup, so a hash collision can never serve wrong keys.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};

use candle_core::Tensor;

use crate::error::Result;
use crate::model::KvCache;

struct Block {
    parent: u64,
    tokens: Vec<u32>,
    k: Vec<Tensor>,
    v: Vec<Tensor>,
    bytes: usize,
    last_used: u64,
}

/// The cache. Not thread-safe by itself; the engine thread owns it.
pub struct PrefixCache {
    block_tokens: usize,
    budget_bytes: usize,
    used_bytes: usize,
    blocks: HashMap<u64, Block>,
    clock: u64,
    /// Prompt tokens looked up (vLLM's `prefix_cache_queries`).
    pub queried_tokens: u64,
    /// Prompt tokens served from the cache (vLLM's `prefix_cache_hits`).
    pub hit_tokens: u64,
}

impl std::fmt::Debug for PrefixCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PrefixCache")
            .field("block_tokens", &self.block_tokens)
            .field("blocks", &self.blocks.len())
            .field("used_bytes", &self.used_bytes)
            .field("budget_bytes", &self.budget_bytes)
            .finish()
    }
}

fn chain(parent: u64, tokens: &[u32]) -> u64 {
    let mut h = DefaultHasher::new();
    parent.hash(&mut h);
    tokens.hash(&mut h);
    h.finish()
}

impl PrefixCache {
    /// A cache of `block_tokens`-token blocks holding at most `budget_bytes` of keys and values
    /// (0 disables it).
    pub fn new(block_tokens: usize, budget_bytes: usize) -> Self {
        Self {
            block_tokens: block_tokens.max(1),
            budget_bytes,
            used_bytes: 0,
            blocks: HashMap::new(),
            clock: 0,
            queried_tokens: 0,
            hit_tokens: 0,
        }
    }

    /// Tokens per block.
    pub fn block_tokens(&self) -> usize {
        self.block_tokens
    }

    /// Bytes held.
    pub fn used_bytes(&self) -> usize {
        self.used_bytes
    }

    /// Blocks held.
    pub fn len(&self) -> usize {
        self.blocks.len()
    }

    /// Whether no block is held.
    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }

    /// How many tokens of `prompt` [`PrefixCache::restore`] would restore now (no side effects).
    pub fn cached_len(&self, prompt: &[u32]) -> usize {
        if self.budget_bytes == 0 || prompt.len() < 2 {
            return 0;
        }
        let usable = (prompt.len() - 1) / self.block_tokens;
        let mut parent = 0u64;
        let mut n = 0;
        for b in 0..usable {
            let toks = &prompt[b * self.block_tokens..(b + 1) * self.block_tokens];
            let key = chain(parent, toks);
            match self.blocks.get(&key) {
                Some(block) if block.parent == parent && block.tokens == toks => n += 1,
                _ => break,
            }
            parent = key;
        }
        n * self.block_tokens
    }

    /// Copy the longest cached prefix of `prompt` into the empty `cache`; returns the number of
    /// tokens now in it. At least one prompt token is always left to compute, because the
    /// logits of the last prompt token are needed to start generating.
    pub fn restore(&mut self, prompt: &[u32], cache: &mut KvCache) -> Result<usize> {
        self.queried_tokens += prompt.len() as u64;
        if self.budget_bytes == 0 || prompt.len() < 2 {
            return Ok(0);
        }
        let usable = (prompt.len() - 1) / self.block_tokens;
        let mut keys = Vec::new();
        let mut parent = 0u64;
        for b in 0..usable {
            let toks = &prompt[b * self.block_tokens..(b + 1) * self.block_tokens];
            let key = chain(parent, toks);
            match self.blocks.get(&key) {
                Some(block) if block.parent == parent && block.tokens == toks => keys.push(key),
                _ => break,
            }
            parent = key;
        }
        self.clock += 1;
        for (b, key) in keys.iter().enumerate() {
            let block = self.blocks.get_mut(key).expect("looked up above");
            block.last_used = self.clock;
            for layer in 0..block.k.len() {
                cache.write_block(
                    layer,
                    b * self.block_tokens,
                    &block.k[layer],
                    &block.v[layer],
                )?;
            }
        }
        let n = keys.len() * self.block_tokens;
        cache.set_tokens(&prompt[..n])?;
        self.hit_tokens += n as u64;
        Ok(n)
    }

    /// Remember the full blocks of `prompt` whose keys and values are in `cache`.
    pub fn insert(&mut self, prompt: &[u32], cache: &KvCache) -> Result<()> {
        if self.budget_bytes == 0 {
            return Ok(());
        }
        let full = prompt.len().min(cache.len()) / self.block_tokens;
        let mut parent = 0u64;
        self.clock += 1;
        for b in 0..full {
            let start = b * self.block_tokens;
            let toks = &prompt[start..start + self.block_tokens];
            let key = chain(parent, toks);
            if let Some(block) = self.blocks.get_mut(&key) {
                block.last_used = self.clock;
            } else {
                let n_layer = cache_layers(cache);
                let mut k = Vec::with_capacity(n_layer);
                let mut v = Vec::with_capacity(n_layer);
                let mut bytes = 0;
                for layer in 0..n_layer {
                    let (kb, vb) = cache.read_block(layer, start, self.block_tokens)?;
                    bytes += (kb.elem_count() + vb.elem_count()) * kb.dtype().size_in_bytes();
                    k.push(kb);
                    v.push(vb);
                }
                if bytes > self.budget_bytes {
                    return Ok(());
                }
                self.evict_for(bytes);
                self.used_bytes += bytes;
                self.blocks.insert(
                    key,
                    Block {
                        parent,
                        tokens: toks.to_vec(),
                        k,
                        v,
                        bytes,
                        last_used: self.clock,
                    },
                );
            }
            parent = key;
        }
        Ok(())
    }

    fn evict_for(&mut self, bytes: usize) {
        while self.used_bytes + bytes > self.budget_bytes {
            // Least recently used first; among equals, a later block of a chain goes before its
            // parent would matter little, since a chain is touched as a whole.
            let Some((&key, _)) = self.blocks.iter().min_by_key(|(_, b)| b.last_used) else {
                break;
            };
            if let Some(b) = self.blocks.remove(&key) {
                self.used_bytes -= b.bytes;
            }
        }
    }
}

fn cache_layers(cache: &KvCache) -> usize {
    cache.n_layer()
}
