//! Streaming multi-literal search (Aho–Corasick) for the evaluator.
//!
//! The automaton is built once from the fixture's literals; its only
//! state between chunks is the current node, so a literal split across
//! any number of chunk boundaries is found, memory stays bounded by the
//! literals' total length whatever the stream's, and each byte costs
//! amortised constant work plus one step per literal ending there.

/// One trie node.
#[derive(Clone, Debug)]
struct Node {
    /// Children, sorted by byte.
    next: Vec<(u8, u32)>,
    /// The longest proper suffix of this node's string that is a trie
    /// node.
    fail: u32,
    /// The nearest node along the fail chain (this one excluded) that ends
    /// a literal, or 0 for none (the root ends none: literals are
    /// non-empty).
    out: u32,
    /// The literal this node ends, if any.
    literal: Option<u32>,
}

impl Node {
    fn new() -> Node {
        Node {
            next: Vec::new(),
            fail: 0,
            out: 0,
            literal: None,
        }
    }

    fn child(&self, b: u8) -> Option<u32> {
        self.next
            .binary_search_by_key(&b, |&(k, _)| k)
            .ok()
            .and_then(|i| self.next.get(i))
            .map(|&(_, n)| n)
    }
}

/// The automaton, the current position and which literals were seen.
#[derive(Clone, Debug)]
pub(crate) struct Matcher {
    nodes: Vec<Node>,
    state: u32,
    seen: Vec<bool>,
}

impl Matcher {
    /// An automaton for `literals` (empty literals are never matched).
    pub(crate) fn new<S: AsRef<[u8]>>(literals: &[S]) -> Matcher {
        let mut nodes = vec![Node::new()];
        for (i, lit) in literals.iter().enumerate() {
            let lit = lit.as_ref();
            if lit.is_empty() {
                continue;
            }
            let mut cur = 0usize;
            for &b in lit {
                let existing = nodes.get(cur).and_then(|n| n.child(b));
                cur = match existing {
                    Some(n) => n as usize,
                    None => {
                        let id = nodes.len();
                        nodes.push(Node::new());
                        if let Some(n) = nodes.get_mut(cur) {
                            let at = n.next.partition_point(|&(k, _)| k < b);
                            n.next.insert(at, (b, id as u32));
                        }
                        id
                    }
                };
            }
            if let Some(n) = nodes.get_mut(cur) {
                if n.literal.is_none() {
                    n.literal = Some(i as u32);
                }
            }
        }
        // Fail and output links, breadth first.
        let mut queue = std::collections::VecDeque::new();
        let root_children: Vec<u32> = nodes
            .first()
            .map(|root| root.next.iter().map(|&(_, n)| n).collect())
            .unwrap_or_default();
        for c in root_children {
            queue.push_back(c);
        }
        while let Some(u) = queue.pop_front() {
            let children: Vec<(u8, u32)> = nodes
                .get(u as usize)
                .map(|n| n.next.clone())
                .unwrap_or_default();
            for (b, v) in children {
                let mut f = nodes.get(u as usize).map_or(0, |n| n.fail);
                let fail = loop {
                    if let Some(n) = nodes.get(f as usize).and_then(|n| n.child(b)) {
                        if n != v {
                            break n;
                        }
                    }
                    if f == 0 {
                        break 0;
                    }
                    f = nodes.get(f as usize).map_or(0, |n| n.fail);
                };
                let out = match nodes.get(fail as usize) {
                    Some(n) if n.literal.is_some() => fail,
                    Some(n) => n.out,
                    None => 0,
                };
                if let Some(n) = nodes.get_mut(v as usize) {
                    n.fail = fail;
                    n.out = out;
                }
                queue.push_back(v);
            }
        }
        Matcher {
            nodes,
            state: 0,
            seen: vec![false; literals.len()],
        }
    }

    fn mark(&mut self, node: u32) {
        let mut n = node;
        loop {
            let Some(cur) = self.nodes.get(n as usize) else {
                return;
            };
            if let Some(lit) = cur.literal {
                if let Some(s) = self.seen.get_mut(lit as usize) {
                    *s = true;
                }
            }
            if cur.out == 0 {
                return;
            }
            n = cur.out;
        }
    }

    /// Advances over `chunk`.
    pub(crate) fn feed(&mut self, chunk: &[u8]) {
        if self.nodes.len() <= 1 {
            return;
        }
        let mut s = self.state;
        for &b in chunk {
            s = loop {
                let node = self.nodes.get(s as usize);
                if let Some(n) = node.and_then(|n| n.child(b)) {
                    break n;
                }
                if s == 0 {
                    break 0;
                }
                s = node.map_or(0, |n| n.fail);
            };
            let hit = self
                .nodes
                .get(s as usize)
                .is_some_and(|n| n.literal.is_some() || n.out != 0);
            if hit {
                self.mark(s);
            }
        }
        self.state = s;
    }

    /// Whether literal `i` occurred so far.
    pub(crate) fn seen(&self, i: usize) -> bool {
        self.seen.get(i).copied().unwrap_or(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(hay: &[u8], lit: &[u8]) -> bool {
        !lit.is_empty() && hay.windows(lit.len()).any(|w| w == lit)
    }

    #[test]
    fn finds_literals_across_every_split() {
        let lits = ["he", "she", "his", "hers", "ers", "\u{e9}t\u{e9}", "s"];
        let hay = "ushers and \u{e9}t\u{e9}".as_bytes();
        for cut in 0..=hay.len() {
            for cut2 in cut..=hay.len() {
                let mut m = Matcher::new(&lits);
                m.feed(&hay[..cut]);
                m.feed(&hay[cut..cut2]);
                m.feed(&hay[cut2..]);
                for (i, l) in lits.iter().enumerate() {
                    assert_eq!(m.seen(i), naive(hay, l.as_bytes()), "{l} {cut} {cut2}");
                }
            }
        }
    }

    #[test]
    fn byte_at_a_time_matches_naive_on_overlaps() {
        let lits = ["aab", "ab", "b", "abab", "ba", "zz"];
        let hay = b"aaabababa";
        let mut m = Matcher::new(&lits);
        for b in hay {
            m.feed(core::slice::from_ref(b));
        }
        for (i, l) in lits.iter().enumerate() {
            assert_eq!(m.seen(i), naive(hay, l.as_bytes()), "{l}");
        }
    }

    #[test]
    fn no_literals_and_empty_literals() {
        let mut m = Matcher::new::<&str>(&[]);
        m.feed(b"anything");
        assert!(!m.seen(0));
        let mut m = Matcher::new(&["", "x"]);
        m.feed(b"x");
        assert!(!m.seen(0) && m.seen(1));
    }
}
