//! The start order of a set of resources: dependencies first, the listed order kept between
//! resources that do not depend on each other; cycles, self-dependencies and dependencies that
//! are not loaded refused by name.

use std::collections::{HashMap, HashSet};

use crate::error::{Error, ResourceRefusal, Result};

/// The names of `wanted` in start order. `dependencies` answers a loaded resource's declared
/// dependencies (`None` when no resource of that name is loaded). Dependencies outside
/// `wanted` are walked (a cycle through them is still a cycle) but not answered: they must be
/// running already, which the start of each resource checks.
///
/// # Errors
/// [`ResourceRefusal::Unknown`] for a wanted name not loaded, `MissingDependency` for a
/// dependency not loaded, `SelfDependency`, and `DependencyCycle` naming the cycle in order
/// (`a -> b -> a`).
pub(crate) fn start_order<'a>(
    wanted: &'a [&'a str],
    dependencies: impl Fn(&str) -> Option<&'a [String]>,
) -> Result<Vec<&'a str>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Visiting,
        Done,
    }
    /// One resource on the walk's path: its name, its dependencies and how many of them
    /// have been walked.
    struct Frame<'a> {
        name: &'a str,
        deps: &'a [String],
        next: usize,
    }
    let is_wanted: HashSet<&str> = wanted.iter().copied().collect();
    let mut marks: HashMap<&'a str, Mark> = HashMap::new();
    // The path from the wanted name being walked down to the resource being looked at, kept
    // on the heap: a chain of any length costs memory, never stack.
    let mut path: Vec<Frame<'a>> = Vec::new();
    let mut out = Vec::new();
    // Enters `name` below the top of `path`, as the recursive walk's call did.
    let enter = |name: &'a str,
                 path: &mut Vec<Frame<'a>>,
                 marks: &mut HashMap<&'a str, Mark>|
     -> Result<()> {
        match marks.get(name) {
            Some(Mark::Done) => return Ok(()),
            Some(Mark::Visiting) => {
                let from = path.iter().position(|f| f.name == name).unwrap_or(0);
                let mut cycle: Vec<&str> = path[from..].iter().map(|f| f.name).collect();
                cycle.push(name);
                return Err(refused(
                    ResourceRefusal::DependencyCycle,
                    format!("dependency cycle: {}", cycle.join(" -> ")),
                ));
            }
            None => {}
        }
        let Some(deps) = dependencies(name) else {
            return Err(match path.last() {
                Some(parent) => refused(
                    ResourceRefusal::MissingDependency,
                    format!(
                        "resource '{}' depends on '{name}', which is not loaded",
                        parent.name
                    ),
                ),
                None => refused(
                    ResourceRefusal::Unknown,
                    format!("no resource named '{name}' is loaded"),
                ),
            });
        };
        if deps.iter().any(|d| d == name) {
            return Err(refused(
                ResourceRefusal::SelfDependency,
                format!("resource '{name}' depends on itself"),
            ));
        }
        marks.insert(name, Mark::Visiting);
        path.push(Frame {
            name,
            deps,
            next: 0,
        });
        Ok(())
    };
    for name in wanted {
        enter(name, &mut path, &mut marks)?;
        while let Some(top) = path.last_mut() {
            if let Some(dep) = top.deps.get(top.next) {
                top.next += 1;
                enter(dep, &mut path, &mut marks)?;
                continue;
            }
            let name = top.name;
            path.pop();
            marks.insert(name, Mark::Done);
            if is_wanted.contains(name) {
                out.push(name);
            }
        }
    }
    Ok(out)
}

pub(crate) fn refused(refusal: ResourceRefusal, message: String) -> Error {
    Error::Resource { refusal, message }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn order(graph: &[(&str, &[&str])], wanted: &[&str]) -> std::result::Result<String, String> {
        let graph: HashMap<String, Vec<String>> = graph
            .iter()
            .map(|(n, d)| (n.to_string(), d.iter().map(|s| s.to_string()).collect()))
            .collect();
        start_order(wanted, |n| graph.get(n).map(Vec::as_slice))
            .map(|v| v.join(","))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn dependencies_come_first_and_the_listed_order_is_kept() {
        let g: &[(&str, &[&str])] = &[
            ("report", &["scores", "store"]),
            ("scores", &["store"]),
            ("store", &[]),
            ("chat", &[]),
        ];
        assert_eq!(
            order(g, &["chat", "report", "scores", "store"]).unwrap(),
            "chat,store,scores,report"
        );
        assert_eq!(order(g, &["store", "chat"]).unwrap(), "store,chat");
        // A dependency outside the set is walked, not answered.
        assert_eq!(order(g, &["report"]).unwrap(), "report");
    }

    #[test]
    fn cycles_self_and_missing_are_named() {
        let g: &[(&str, &[&str])] = &[("a", &["b"]), ("b", &["c"]), ("c", &["a"]), ("s", &["s"])];
        assert_eq!(
            order(g, &["a"]).unwrap_err(),
            "dependency cycle: a -> b -> c -> a"
        );
        assert_eq!(
            order(g, &["s"]).unwrap_err(),
            "resource 's' depends on itself"
        );
        let g: &[(&str, &[&str])] = &[("a", &["gone"])];
        assert_eq!(
            order(g, &["a"]).unwrap_err(),
            "resource 'a' depends on 'gone', which is not loaded"
        );
        assert_eq!(
            order(g, &["x"]).unwrap_err(),
            "no resource named 'x' is loaded"
        );
    }

    #[test]
    fn a_chain_of_100_000_resources_is_ordered_without_deep_recursion() {
        const N: usize = 100_000;
        let names: Vec<String> = (0..N).map(|i| format!("r{i}")).collect();
        // r0 depends on r1, which depends on r2, ... r99999 depends on nothing.
        let deps: Vec<Vec<String>> = (0..N)
            .map(|i| names.get(i + 1).cloned().into_iter().collect())
            .collect();
        let index: HashMap<&str, usize> = names
            .iter()
            .enumerate()
            .map(|(i, n)| (n.as_str(), i))
            .collect();
        let by_name = |n: &str| index.get(n).map(|&i| deps[i].as_slice());
        let wanted: Vec<&str> = names.iter().map(String::as_str).collect();
        let began = std::time::Instant::now();
        // The walk runs on a thread with a small stack: a recursive walk would overflow it
        // within a few thousand links.
        let order = std::thread::scope(|s| {
            std::thread::Builder::new()
                .stack_size(256 * 1024)
                .spawn_scoped(s, || start_order(&wanted, by_name).map(|o| o.to_vec()))
                .unwrap()
                .join()
                .unwrap()
        })
        .unwrap();
        let took = began.elapsed();
        // Started last link first; stopped (the start order reversed, as `shutdown` does) first
        // link first.
        assert_eq!(order.len(), N);
        assert_eq!(order[0], "r99999");
        assert_eq!(order[N - 1], "r0");
        assert!(order.iter().rev().zip(&names).all(|(a, b)| a == b));
        let stop: Vec<&str> = order.iter().rev().copied().collect();
        assert_eq!(stop[..2], ["r0", "r1"]);
        assert!(took < std::time::Duration::from_secs(5), "took {took:?}");

        // The same chain closed into a cycle is named whole.
        let mut deps = deps;
        deps[N - 1] = vec!["r0".to_owned()];
        let by_name = |n: &str| index.get(n).map(|&i| deps[i].as_slice());
        let err = std::thread::scope(|s| {
            std::thread::Builder::new()
                .stack_size(256 * 1024)
                .spawn_scoped(s, || start_order(&["r0"], by_name).map(|o| o.len()))
                .unwrap()
                .join()
                .unwrap()
        })
        .unwrap_err()
        .to_string();
        assert!(
            err.starts_with("dependency cycle: r0 -> r1 -> r2 -> "),
            "{}",
            &err[..80]
        );
        assert!(
            err.ends_with(" -> r99998 -> r99999 -> r0"),
            "{}",
            &err[err.len() - 80..]
        );
    }
}
