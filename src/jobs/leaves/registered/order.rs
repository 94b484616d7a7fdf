//! The order of one phase's registered jobs, from what each declares: `after` and `before`
//! (names of other jobs) and `reads` and `writes` (names of what it reads and changes).
//!
//! The edges, each "runs before":
//! - `after = { "a" }` on job `j`: `a` before `j`; `before = { "b" }`: `j` before `b`. A name
//!   that no live job of the phase holds adds nothing (yet): the edge appears when a job of
//!   that name registers in the phase.
//! - A job that writes a name runs before a job that reads it without writing it, unless the
//!   declared order (after/before alone) already puts the reader first: then the reader reads
//!   what the writer left the frame before. Two jobs that both write a name get no edge from
//!   it; when nothing else orders them, they are an [`UnorderedWrite`].
//!
//! Jobs then run in waves: a job's wave is one past the latest wave of the jobs that run
//! before it (the first wave holds the jobs nothing precedes), and within a wave jobs keep
//! their registration order (their ids). That is a topological order of the edges; it puts
//! independent jobs in registration order within each wave, and lets the pool jobs of one wave
//! run at once.
//!
//! This file is plain data in, order out: no Luau, no lock. The directory (`directory.rs`)
//! calls it under its lock; a registration whose edges close a cycle is refused there with
//! [`Cycle`].

use std::collections::{HashMap, VecDeque};

/// The most names one of `reads`, `writes`, `after` and `before` may hold: 64.
pub(crate) const MAX_DECLARED_NAMES: usize = 64;

/// The most live jobs one phase may hold: 4,096. Ordering a phase keeps, at most, a set of
/// jobs per job (2 MiB at the bound), and a registration resolves its phase again.
pub(crate) const MAX_PHASE_JOBS: usize = 4096;

/// What a job declares about its order and access. The lists are deduplicated and keep the
/// order written.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Declared {
    pub(crate) reads: Vec<String>,
    pub(crate) writes: Vec<String>,
    pub(crate) after: Vec<String>,
    pub(crate) before: Vec<String>,
    pub(crate) pure: bool,
}

/// One job of the phase, as the order sees it.
pub(crate) struct Node<'a> {
    pub(crate) id: u64,
    pub(crate) name: Option<&'a str>,
    pub(crate) declared: &'a Declared,
}

/// Where a job runs in its phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Placed {
    pub(crate) id: u64,
    /// From 1: its place in the phase's run order.
    pub(crate) position: u32,
    /// From 1: its wave.
    pub(crate) wave: u32,
}

/// Two jobs that write `name` with nothing ordering them; `first` registered before `second`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct UnorderedWrite {
    pub(crate) first: u64,
    pub(crate) second: u64,
    pub(crate) name: String,
}

/// A phase's resolved order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct PhaseOrder {
    /// Every job of the phase, in run order.
    pub(crate) placed: Vec<Placed>,
    pub(crate) unordered_writes: Vec<UnorderedWrite>,
}

impl PhaseOrder {
    /// The waves, in order, each its jobs' ids in run order.
    pub(crate) fn waves(&self) -> Vec<Vec<u64>> {
        let mut waves: Vec<Vec<u64>> = Vec::new();
        for placed in &self.placed {
            if waves.len() < placed.wave as usize {
                waves.push(Vec::new());
            }
            if let Some(wave) = waves.last_mut() {
                wave.push(placed.id);
            }
        }
        waves
    }

    pub(crate) fn of(&self, id: u64) -> Option<Placed> {
        self.placed.iter().find(|p| p.id == id).copied()
    }
}

/// A cycle of the edges: job ids, each running before the next, the first repeated at the end.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Cycle(pub(crate) Vec<u64>);

/// How write→read edges that would close a cycle are treated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Strictness {
    /// Refused: a registration must fit every edge it makes.
    Strict,
    /// Left out, in id order. Only a cancellation can make this differ from `Strict` (an
    /// explicit path that kept a write→read edge out may go with the job cancelled).
    Lenient,
}

/// A set of node indices.
#[derive(Clone)]
struct Bits(Vec<u64>);

impl Bits {
    fn new(n: usize) -> Bits {
        Bits(vec![0; n.div_ceil(64)])
    }
    fn set(&mut self, i: usize) {
        self.0[i / 64] |= 1 << (i % 64);
    }
    fn has(&self, i: usize) -> bool {
        self.0[i / 64] & (1 << (i % 64)) != 0
    }
    fn union(&mut self, other: &Bits) {
        for (a, b) in self.0.iter_mut().zip(&other.0) {
            *a |= b;
        }
    }
}

/// The edges between `n` nodes, as successor lists without repeats.
struct Graph {
    succ: Vec<Vec<usize>>,
}

impl Graph {
    fn new(n: usize) -> Graph {
        Graph {
            succ: vec![Vec::new(); n],
        }
    }

    fn add(&mut self, from: usize, to: usize) {
        if !self.succ[from].contains(&to) {
            self.succ[from].push(to);
        }
    }

    /// Kahn's walk: the nodes in a topological order, or the ones left on a cycle.
    fn topological(&self) -> Result<Vec<usize>, Vec<bool>> {
        let n = self.succ.len();
        let mut indegree = vec![0usize; n];
        for succ in &self.succ {
            for &s in succ {
                indegree[s] += 1;
            }
        }
        let mut ready: VecDeque<usize> = (0..n).filter(|&i| indegree[i] == 0).collect();
        let mut order = Vec::with_capacity(n);
        while let Some(i) = ready.pop_front() {
            order.push(i);
            for &s in &self.succ[i] {
                indegree[s] -= 1;
                if indegree[s] == 0 {
                    ready.push_back(s);
                }
            }
        }
        if order.len() == n {
            Ok(order)
        } else {
            Err(indegree.iter().map(|&d| d > 0).collect())
        }
    }

    /// For each node, the nodes that reach it, given a topological order.
    fn ancestors(&self, order: &[usize]) -> Vec<Bits> {
        let n = self.succ.len();
        let mut anc = vec![Bits::new(n); n];
        for &i in order {
            let mut mine = anc[i].clone();
            mine.set(i);
            for &s in &self.succ[i] {
                anc[s].union(&mine);
            }
        }
        anc
    }

    /// Whether `to` can be reached from `from`.
    fn reaches(&self, from: usize, to: usize) -> bool {
        let mut seen = vec![false; self.succ.len()];
        let mut stack = vec![from];
        while let Some(i) = stack.pop() {
            if i == to {
                return true;
            }
            if !std::mem::replace(&mut seen[i], true) {
                stack.extend(&self.succ[i]);
            }
        }
        false
    }

    /// A cycle among the nodes `left` (those Kahn's walk could not place): through `prefer`
    /// when it is on one, else through the lowest such node on one.
    fn cycle(&self, left: &[bool], prefer: Option<usize>) -> Vec<usize> {
        let on_cycle = |start: usize| -> Option<Vec<usize>> {
            // Breadth first from `start` back to it: the shortest cycle through it.
            let mut from = vec![usize::MAX; self.succ.len()];
            let mut queue = VecDeque::from([start]);
            while let Some(i) = queue.pop_front() {
                for &s in &self.succ[i] {
                    if !left[s] {
                        continue;
                    }
                    if s == start {
                        // Back from `i` to `start`, then turned around into run order.
                        let mut back = Vec::new();
                        let mut at = i;
                        while at != start {
                            back.push(at);
                            at = from[at];
                        }
                        let mut path = vec![start];
                        path.extend(back.into_iter().rev());
                        path.push(start);
                        return Some(path);
                    }
                    if from[s] == usize::MAX {
                        from[s] = i;
                        queue.push_back(s);
                    }
                }
            }
            None
        };
        prefer
            .filter(|&p| left[p])
            .and_then(on_cycle)
            .or_else(|| (0..left.len()).filter(|&i| left[i]).find_map(on_cycle))
            .unwrap_or_default()
    }
}

/// Orders the jobs of one phase. `nodes` are in registration (id) order; `prefer` is the job
/// a refused cycle is named from (the one registering).
pub(crate) fn resolve(
    nodes: &[Node<'_>],
    strictness: Strictness,
    prefer: Option<u64>,
) -> Result<PhaseOrder, Cycle> {
    let n = nodes.len();
    let by_name: HashMap<&str, usize> = nodes
        .iter()
        .enumerate()
        .filter_map(|(i, node)| node.name.map(|name| (name, i)))
        .collect();
    let prefer = prefer.and_then(|id| nodes.iter().position(|node| node.id == id));
    let ids = |path: Vec<usize>| Cycle(path.into_iter().map(|i| nodes[i].id).collect());

    let mut graph = Graph::new(n);
    for (j, node) in nodes.iter().enumerate() {
        for name in &node.declared.after {
            if let Some(&i) = by_name.get(name.as_str()) {
                graph.add(i, j);
            }
        }
        for name in &node.declared.before {
            if let Some(&i) = by_name.get(name.as_str()) {
                graph.add(j, i);
            }
        }
    }
    let declared_order = graph
        .topological()
        .map_err(|left| ids(graph.cycle(&left, prefer)))?;

    // Write→read edges, in (writer, reader) order.
    let mut writers: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, node) in nodes.iter().enumerate() {
        for name in &node.declared.writes {
            writers.entry(name.as_str()).or_default().push(i);
        }
    }
    let mut data_edges = Vec::new();
    for (r, node) in nodes.iter().enumerate() {
        for name in &node.declared.reads {
            if node.declared.writes.contains(name) {
                continue;
            }
            for &w in writers.get(name.as_str()).into_iter().flatten() {
                if w != r {
                    data_edges.push((w, r));
                }
            }
        }
    }
    if !data_edges.is_empty() {
        // The declared order puts the reader first: it reads last frame's value.
        let declared_before = graph.ancestors(&declared_order);
        data_edges.retain(|&(w, r)| !declared_before[w].has(r));
    }
    data_edges.sort_unstable();
    data_edges.dedup();
    for (w, r) in data_edges {
        if strictness == Strictness::Lenient && graph.reaches(r, w) {
            continue;
        }
        graph.add(w, r);
    }
    let order = graph
        .topological()
        .map_err(|left| ids(graph.cycle(&left, prefer)))?;

    let mut wave = vec![0u32; n];
    for &i in &order {
        for &s in &graph.succ[i] {
            wave[s] = wave[s].max(wave[i] + 1);
        }
    }
    let mut run: Vec<usize> = (0..n).collect();
    run.sort_by_key(|&i| (wave[i], nodes[i].id));
    let placed = run
        .iter()
        .enumerate()
        .map(|(at, &i)| Placed {
            id: nodes[i].id,
            position: at as u32 + 1,
            wave: wave[i] + 1,
        })
        .collect();

    let mut unordered_writes = Vec::new();
    let mut names: Vec<&&str> = writers
        .iter()
        .filter(|(_, ws)| ws.len() > 1)
        .map(|(name, _)| name)
        .collect();
    names.sort_unstable();
    let before = if names.is_empty() {
        Vec::new()
    } else {
        graph.ancestors(&order)
    };
    for name in names {
        let ws = &writers[*name];
        for (k, &a) in ws.iter().enumerate() {
            for &b in &ws[k + 1..] {
                if !before[b].has(a) && !before[a].has(b) {
                    unordered_writes.push(UnorderedWrite {
                        first: nodes[a].id,
                        second: nodes[b].id,
                        name: (*name).to_owned(),
                    });
                }
            }
        }
    }
    Ok(PhaseOrder {
        placed,
        unordered_writes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn declared(after: &[&str], before: &[&str], reads: &[&str], writes: &[&str]) -> Declared {
        let v = |s: &[&str]| s.iter().map(|s| s.to_string()).collect();
        Declared {
            reads: v(reads),
            writes: v(writes),
            after: v(after),
            before: v(before),
            pure: false,
        }
    }

    /// The jobs as nodes, with ids from 1 in the order given.
    fn nodes<'a>(jobs: &'a [(&'a str, Declared)]) -> Vec<Node<'a>> {
        jobs.iter()
            .enumerate()
            .map(|(i, (name, declared))| Node {
                id: i as u64 + 1,
                name: Some(name),
                declared,
            })
            .collect()
    }

    fn order(jobs: &[(&str, Declared)], strictness: Strictness) -> Result<PhaseOrder, Cycle> {
        resolve(&nodes(jobs), strictness, None)
    }

    fn ids(order: &PhaseOrder) -> Vec<(u64, u32)> {
        order.placed.iter().map(|p| (p.id, p.wave)).collect()
    }

    #[test]
    fn waves_follow_the_edges_and_ties_keep_registration_order() {
        let jobs = [
            ("c", declared(&["a"], &[], &[], &[])),
            ("a", declared(&[], &[], &[], &[])),
            ("r", declared(&[], &[], &["x"], &[])),
            ("w", declared(&[], &[], &[], &["x"])),
            ("b", declared(&[], &["a"], &[], &[])),
        ];
        let o = order(&jobs, Strictness::Strict).unwrap();
        // b before a before c; w before r; the rest keep their ids within a wave.
        assert_eq!(ids(&o), [(4, 1), (5, 1), (2, 2), (3, 2), (1, 3)]);
        assert!(o.unordered_writes.is_empty());
        assert_eq!(o.waves(), [vec![4, 5], vec![2, 3], vec![1]]);
    }

    #[test]
    fn a_cycle_is_named_in_run_order_from_the_preferred_job() {
        let jobs = [
            ("a", declared(&["b"], &[], &[], &[])),
            ("b", declared(&["c"], &[], &[], &[])),
            ("c", declared(&["a"], &[], &[], &[])),
        ];
        let nodes = nodes(&jobs);
        // c after a, a after b, b after c: c runs before b, b before a, a before c.
        assert_eq!(
            resolve(&nodes, Strictness::Strict, Some(3)),
            Err(Cycle(vec![3, 2, 1, 3]))
        );
        assert_eq!(
            resolve(&nodes, Strictness::Strict, None),
            Err(Cycle(vec![1, 3, 2, 1]))
        );
    }

    #[test]
    fn mutual_reads_are_a_cycle_unless_the_declared_order_settles_them() {
        let mutual = [
            ("a", declared(&[], &[], &["y"], &["x"])),
            ("b", declared(&[], &[], &["x"], &["y"])),
        ];
        assert_eq!(
            order(&mutual, Strictness::Strict),
            Err(Cycle(vec![1, 2, 1]))
        );
        // Leniently, the first write→read edge stays and the one closing the cycle goes.
        assert_eq!(
            ids(&order(&mutual, Strictness::Lenient).unwrap()),
            [(1, 1), (2, 2)]
        );
        let settled = [
            ("a", declared(&[], &[], &["y"], &["x"])),
            ("b", declared(&[], &["a"], &["x"], &["y"])),
        ];
        assert_eq!(
            ids(&order(&settled, Strictness::Strict).unwrap()),
            [(2, 1), (1, 2)]
        );
    }

    #[test]
    fn two_writers_are_unordered_until_something_orders_them() {
        let loose = [
            ("a", declared(&[], &[], &["x"], &["x"])),
            ("b", declared(&[], &[], &[], &["x", "y"])),
            ("c", declared(&[], &[], &[], &["y"])),
        ];
        let o = order(&loose, Strictness::Strict).unwrap();
        let pairs: Vec<(u64, u64, &str)> = o
            .unordered_writes
            .iter()
            .map(|u| (u.first, u.second, u.name.as_str()))
            .collect();
        assert_eq!(pairs, [(1, 2, "x"), (2, 3, "y")]);
        let ordered = [
            ("a", declared(&[], &[], &["x"], &["x"])),
            ("b", declared(&["a"], &["c"], &[], &["x", "y"])),
            ("c", declared(&[], &[], &[], &["y"])),
        ];
        assert!(order(&ordered, Strictness::Strict)
            .unwrap()
            .unordered_writes
            .is_empty());
    }

    #[test]
    fn names_of_no_live_job_add_nothing() {
        let jobs = [("a", declared(&["ghost"], &["nobody"], &[], &[]))];
        assert_eq!(ids(&order(&jobs, Strictness::Strict).unwrap()), [(1, 1)]);
        let own = [("a", declared(&["a"], &[], &[], &[]))];
        assert_eq!(order(&own, Strictness::Strict), Err(Cycle(vec![1, 1])));
    }
}
