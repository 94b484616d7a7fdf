//! Shared helpers: a module tree on disk and a domain rooted in it.

use std::path::{Path, PathBuf};

use skein::{DomainSpec, Plan, Pool, ScriptDomain};

/// A temporary folder of Luau modules.
pub struct Tree {
    pub dir: tempfile::TempDir,
}

impl Tree {
    pub fn new(files: &[(&str, &str)]) -> Tree {
        let dir = tempfile::tempdir().expect("tempdir");
        let tree = Tree { dir };
        for (name, source) in files {
            tree.write(name, source);
        }
        tree
    }

    pub fn path(&self) -> PathBuf {
        self.dir.path().canonicalize().expect("canonical tempdir")
    }

    pub fn write(&self, name: &str, source: &str) {
        let path = self.dir.path().join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("mkdir");
        }
        std::fs::write(path, source).expect("write module");
    }

    pub fn domain(&self, pool: &Pool) -> ScriptDomain {
        self.domain_with(pool, Plan::new())
    }

    pub fn domain_with(&self, pool: &Pool, plan: Plan) -> ScriptDomain {
        ScriptDomain::new(pool, DomainSpec::new("test").plan(plan.root(self.path())))
            .expect("domain")
    }
}

/// Asserts that `haystack` contains `needle`, printing both when it does not.
#[track_caller]
pub fn assert_contains(haystack: &str, needle: &str) {
    assert!(
        haystack.contains(needle),
        "expected to find\n  {needle}\nin\n  {haystack}"
    );
}

#[allow(dead_code)]
pub fn exists(p: &Path) -> bool {
    p.exists()
}
