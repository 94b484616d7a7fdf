//! The start order of a set of resources: dependencies first, the listed order kept between
//! resources that do not depend on each other; cycles, self-dependencies and dependencies that
//! are not loaded refused by name.

use std::collections::HashMap;

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
    struct Walk<'a, F> {
        dependencies: F,
        marks: HashMap<&'a str, Mark>,
        path: Vec<&'a str>,
        out: Vec<&'a str>,
        wanted: &'a [&'a str],
    }
    impl<'a, F: Fn(&str) -> Option<&'a [String]>> Walk<'a, F> {
        fn visit(&mut self, name: &'a str) -> Result<()> {
            match self.marks.get(name) {
                Some(Mark::Done) => return Ok(()),
                Some(Mark::Visiting) => {
                    let from = self.path.iter().position(|n| *n == name).unwrap_or(0);
                    let mut cycle: Vec<&str> = self.path[from..].to_vec();
                    cycle.push(name);
                    return Err(refused(
                        ResourceRefusal::DependencyCycle,
                        format!("dependency cycle: {}", cycle.join(" -> ")),
                    ));
                }
                None => {}
            }
            let Some(deps) = (self.dependencies)(name) else {
                return Err(match self.path.last() {
                    Some(parent) => refused(
                        ResourceRefusal::MissingDependency,
                        format!("resource '{parent}' depends on '{name}', which is not loaded"),
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
            self.marks.insert(name, Mark::Visiting);
            self.path.push(name);
            for dep in deps {
                self.visit(dep)?;
            }
            self.path.pop();
            self.marks.insert(name, Mark::Done);
            if self.wanted.contains(&name) {
                self.out.push(name);
            }
            Ok(())
        }
    }
    let mut walk = Walk {
        dependencies,
        marks: HashMap::new(),
        path: Vec::new(),
        out: Vec::new(),
        wanted,
    };
    for name in wanted {
        walk.visit(name)?;
    }
    Ok(walk.out)
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
}
