//! The layers docs/architecture.md draws, held by the source itself: within each package of the
//! provider and of prism-mock, which module imports which (its `use` declarations and the paths it names, tests
//! and comments left out, names re-exported by the package resolved to the module that defines
//! them). A module never imports one of a layer above its own, and no two modules import each
//! other, directly or round a longer loop. And each field the controllers write has one writer:
//! the functions that build or send its write are called from one module only.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// One package: the folder whose entries are its modules, and the path they are named by.
struct Package {
    dir: &'static str,
    path: &'static str,
    /// Modules by layer, lowest first; a module may import its own layer and the ones below.
    /// Modules not listed take part in the cycle check only.
    layers: &'static [&'static [&'static str]],
}

const PACKAGES: &[Package] = &[
    Package {
        dir: "src",
        path: "crate",
        layers: &[
            &["metrics"],
            &["actuator"],
            &["controller", "render"],
            &["runtime"],
            &["cli_main"],
        ],
    },
    Package {
        dir: "src/controller",
        path: "crate::controller",
        layers: &[
            // The shared ground floor knows no controller.
            &[
                "backoff",
                "cluster_config",
                "error",
                "events",
                "inputs",
                "kit",
                "machine_cache",
                "nodes",
                "shared",
                "stores_ready",
            ],
            // What the controllers (and the `validate` and `doctor` commands) use of each other.
            &["drain", "node_link", "prepare"],
            &["machine", "machineset", "windows_join"],
        ],
    },
    Package {
        dir: "src/actuator",
        path: "crate::actuator",
        layers: &[],
    },
    Package {
        dir: "plan/src",
        path: "crate",
        layers: &[
            &["api"],
            &["vm", "machineset"],
            &["machine"],
            &["windows_join", "doctor"],
        ],
    },
    Package {
        dir: "plan/src/machine",
        path: "crate::machine",
        layers: &[],
    },
    Package {
        dir: "plan/src/machine/decide",
        path: "crate::machine::decide",
        layers: &[
            // The one shared draft; each phase on it.
            &["draft"],
            &["environment", "claims", "economy"],
            &["create", "update"],
            &["delete"],
            &["observe"],
        ],
    },
    // prism-mock (`hack/prism-mock`): its model never imports its HTTP layer.
    Package {
        dir: "../hack/prism-mock/src",
        path: "crate",
        layers: &[
            &["behaviour", "config", "faults", "seed", "store"],
            &["admin", "app", "errors", "server", "tls", "v3", "v4"],
        ],
    },
    Package {
        dir: "../hack/prism-mock/src/store",
        path: "crate::store",
        layers: &[],
    },
    Package {
        dir: "../hack/prism-mock/src/store/vm",
        path: "crate::store::vm",
        layers: &[],
    },
    Package {
        dir: "plan/src/vm",
        path: "crate::vm",
        layers: &[],
    },
];

/// Rust source without comments, string contents and `#[cfg(test)]` items.
fn code_of(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let mut chars = source.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '/' if chars.peek() == Some(&'/') => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        out.push('\n');
                        break;
                    }
                }
            }
            '/' if chars.peek() == Some(&'*') => {
                let mut last = ' ';
                for c in chars.by_ref() {
                    if last == '*' && c == '/' {
                        break;
                    }
                    last = c;
                }
            }
            // A raw string: r"..." or r#"..."# (with as many #).
            'r' if matches!(chars.peek(), Some('#' | '"'))
                && !out.ends_with(|c: char| c.is_alphanumeric() || c == '_') =>
            {
                let mut hashes = 0;
                while chars.peek() == Some(&'#') {
                    chars.next();
                    hashes += 1;
                }
                if chars.next() != Some('"') {
                    // `r#ident`: a raw identifier.
                    out.push('r');
                    continue;
                }
                let closing: String = std::iter::once('"')
                    .chain(std::iter::repeat_n('#', hashes))
                    .collect();
                let mut seen = String::new();
                for c in chars.by_ref() {
                    seen.push(c);
                    if seen.ends_with(&closing) {
                        break;
                    }
                }
                out.push_str("\"\"");
            }
            // A character literal ('"', '\'', 'x'), not a lifetime.
            '\'' => {
                let mut ahead = chars.clone();
                match (ahead.next(), ahead.next()) {
                    (Some('\\'), _) => {
                        chars.next();
                        chars.next();
                        for c in chars.by_ref() {
                            if c == '\'' {
                                break;
                            }
                        }
                    }
                    (Some(_), Some('\'')) => {
                        chars.next();
                        chars.next();
                    }
                    _ => out.push(c),
                }
            }
            '"' => {
                let mut escaped = false;
                for c in chars.by_ref() {
                    if c == '"' && !escaped {
                        break;
                    }
                    escaped = c == '\\' && !escaped;
                }
                out.push_str("\"\"");
            }
            _ => out.push(c),
        }
    }
    // A test module sits at the end of its file here, always after this attribute.
    match out.find("#[cfg(test)]") {
        Some(at) => out[..at].to_owned(),
        None => out,
    }
}

/// The files of module `name` in `dir`: `name.rs`, `name/mod.rs` and everything under `name/`,
/// test files left out.
fn files_of(dir: &Path, name: &str) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let file = dir.join(format!("{name}.rs"));
    if file.is_file() {
        files.push(file);
    }
    let mut folders = vec![dir.join(name)];
    while let Some(folder) = folders.pop() {
        let Ok(entries) = fs::read_dir(&folder) else {
            continue;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            if path.is_dir() {
                folders.push(path);
            } else if path.extension().is_some_and(|e| e == "rs")
                && path.file_stem().is_some_and(|stem| stem != "tests")
            {
                files.push(path);
            }
        }
    }
    files
}

/// The modules of a package: its files and folders, but its own `mod.rs` / `lib.rs` / `main.rs`.
fn modules_of(dir: &Path) -> BTreeSet<String> {
    fs::read_dir(dir)
        .unwrap()
        .filter_map(|entry| {
            let path = entry.unwrap().path();
            let stem = path.file_stem()?.to_str()?.to_owned();
            let module = path.is_dir() || path.extension().is_some_and(|e| e == "rs");
            (module && !["mod", "lib", "main", "tests"].contains(&stem.as_str())).then_some(stem)
        })
        .collect()
}

/// What a `use` tree names at its first level below `prefix`: `a::b`, `{a, B, c::d}` → a, B, c.
fn first_segments(tree: &str) -> Vec<String> {
    let tree = tree.trim();
    let inner = match tree.strip_prefix('{') {
        Some(rest) => rest.strip_suffix('}').unwrap_or(rest),
        None => tree,
    };
    let mut items = Vec::new();
    let mut depth = 0;
    let mut current = String::new();
    for c in inner.chars() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(std::mem::take(&mut current));
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    items.push(current);
    items
        .iter()
        .filter_map(|item| {
            let first = item.trim().split("::").next()?.trim();
            let first = first.split_whitespace().next()?;
            (!first.is_empty()).then(|| first.to_owned())
        })
        .collect()
}

/// Names the package re-exports (`pub use name::{Item, ...}` in its root file), by the module
/// that defines them.
fn reexports(dir: &Path) -> BTreeMap<String, String> {
    let root = ["mod.rs", "lib.rs"]
        .iter()
        .map(|file| dir.join(file))
        .find(|file| file.is_file());
    let Some(root) = root else {
        return BTreeMap::new();
    };
    let code = code_of(&fs::read_to_string(root).unwrap());
    let mut names = BTreeMap::new();
    for statement in code.split(';') {
        let Some(at) = statement.find("pub use ") else {
            continue;
        };
        let path = statement[at + "pub use ".len()..].trim();
        let path = path.strip_prefix("self::").unwrap_or(path);
        let Some((module, rest)) = path.split_once("::") else {
            continue;
        };
        for name in first_segments(rest) {
            names.insert(name, module.to_owned());
        }
    }
    names
}

/// The modules of the package that `module` imports.
fn imports_of(
    dir: &Path,
    package_path: &str,
    module: &str,
    modules: &BTreeSet<String>,
    reexported: &BTreeMap<String, String>,
) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for file in files_of(dir, module) {
        let code = code_of(&fs::read_to_string(&file).unwrap());
        // A direct child file reaches its siblings as `super::`.
        let direct = file.parent() == Some(dir)
            || (file.file_name().is_some_and(|f| f == "mod.rs")
                && file.parent().and_then(Path::parent) == Some(dir));
        let mut prefixes = vec![format!("{package_path}::")];
        if direct {
            prefixes.push("super::".to_owned());
        }
        for prefix in &prefixes {
            let mut rest = code.as_str();
            while let Some(at) = rest.find(prefix.as_str()) {
                let before = rest[..at].chars().next_back();
                rest = &rest[at + prefix.len()..];
                if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                    continue;
                }
                let end = if rest.starts_with('{') {
                    let mut depth = 0;
                    rest.char_indices()
                        .find(|&(_, c)| {
                            match c {
                                '{' => depth += 1,
                                '}' => depth -= 1,
                                _ => {}
                            }
                            depth == 0
                        })
                        .map_or(rest.len(), |(i, _)| i + 1)
                } else {
                    rest.find(|c: char| !(c.is_alphanumeric() || c == '_'))
                        .unwrap_or(rest.len())
                };
                for name in first_segments(&rest[..end]) {
                    let target = if modules.contains(&name) {
                        Some(name)
                    } else {
                        reexported.get(&name).cloned()
                    };
                    if let Some(target) = target.filter(|t| t != module) {
                        found.insert(target);
                    }
                }
            }
        }
    }
    found
}

fn graph_of(package: &Package) -> BTreeMap<String, BTreeSet<String>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(package.dir);
    let modules = modules_of(&dir);
    let reexported = reexports(&dir);
    modules
        .iter()
        .map(|module| {
            let imports = imports_of(&dir, package.path, module, &modules, &reexported);
            (module.clone(), imports)
        })
        .collect()
}

/// Each loop of imports, as the modules on it.
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    let mut loops = Vec::new();
    for start in graph.keys() {
        // Paths from `start` back to it, through modules after it only, so each loop is found
        // once (from its first module).
        let mut stack = vec![(start.clone(), vec![start.clone()])];
        while let Some((at, path)) = stack.pop() {
            for next in graph.get(&at).into_iter().flatten() {
                if next == start {
                    loops.push(path.clone());
                } else if next > start && !path.contains(next) {
                    let mut longer = path.clone();
                    longer.push(next.clone());
                    stack.push((next.clone(), longer));
                }
            }
        }
    }
    loops
}

/// Imports (package folder, module, import) every reading must find (through `use crate::...`, `super::`, a re-exported name):
/// a checker that saw none would pass anything.
const KNOWN_IMPORTS: &[(&str, &str, &str)] = &[
    ("src", "runtime", "controller"),
    ("src/controller", "machine", "shared"),
    ("src/controller", "windows_join", "nodes"),
    ("plan/src", "windows_join", "machine"),
    ("plan/src/machine", "decide", "snapshot"),
    ("plan/src/machine", "snapshot", "provision"),
    ("plan/src/machine/decide", "observe", "economy"),
    ("plan/src/machine/decide", "create", "draft"),
    ("../hack/prism-mock/src", "v3", "store"),
    ("../hack/prism-mock/src", "errors", "store"),
];

#[test]
fn no_module_imports_a_layer_above_it_or_one_that_imports_it_back() {
    let mut problems = Vec::new();
    for package in PACKAGES {
        let graph = graph_of(package);
        assert!(graph.len() > 1, "{}: no modules found", package.dir);
        for (dir, module, import) in KNOWN_IMPORTS {
            if *dir == package.dir {
                assert!(
                    graph[*module].contains(*import),
                    "{dir}: {module} imports {import}, unseen: {graph:?}"
                );
            }
        }
        let layer_of = |module: &str| {
            package
                .layers
                .iter()
                .position(|layer| layer.contains(&module))
        };
        for (module, imports) in &graph {
            for import in imports {
                if let (Some(own), Some(other)) = (layer_of(module), layer_of(import))
                    && other > own
                {
                    problems.push(format!(
                        "{}: {module} imports {import}, a layer above it",
                        package.dir
                    ));
                }
            }
        }
        for cycle in cycles(&graph) {
            problems.push(format!(
                "{}: import cycle {} -> {}",
                package.dir,
                cycle.join(" -> "),
                cycle[0]
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The checker itself finds what it is for: a loop and an import through a re-export.
#[test]
fn the_checker_sees_loops_and_reexported_names() {
    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("a", vec!["b"]),
        ("b", vec!["c"]),
        ("c", vec!["a"]),
        ("d", vec!["a"]),
    ]
    .into_iter()
    .map(|(m, i)| (m.to_owned(), i.into_iter().map(str::to_owned).collect()))
    .collect();
    assert_eq!(cycles(&graph), [["a", "b", "c"]]);
    assert_eq!(
        first_segments("{snapshot::Seen, Decision, self_check::{x, y}}"),
        ["snapshot", "Decision", "self_check"]
    );
    let code = code_of(
        "// use crate::x;\nlet s = \"crate::y\";\nlet q = '\"';\nlet r = r#\"crate::v\"#;\nuse crate::z;\n#[cfg(test)]\nmod tests { use crate::w; }",
    );
    assert!(code.contains("crate::z"), "{code}");
    for hidden in ["crate::x", "crate::y", "crate::v"] {
        assert!(!code.contains(hidden), "{hidden} in {code}");
    }
    assert!(!code.contains("crate::w"));
}

/// Each field and the one module (below `src/`) whose code may call what writes it.
const WRITERS: &[(&str, &str, &str)] = &[
    // The Node's spec.providerID.
    (
        "set_provider_id(",
        "controller/machine",
        "the Node's providerID",
    ),
    // Every Machine field the Machine controller owns (phase, providerStatus but windowsJoin,
    // addresses, conditions, labels, annotations, providerID, finalizer).
    (
        "status_patch(",
        "controller/machine",
        "the Machine's status",
    ),
    (
        "metadata_patch(",
        "controller/machine",
        "the Machine's metadata",
    ),
    // providerStatus.windowsJoin.
    (
        "condition_patch(",
        "controller/windows_join",
        "providerStatus.windowsJoin",
    ),
];

#[test]
fn each_field_has_one_writer() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    let mut folders = vec![src.clone()];
    while let Some(folder) = folders.pop() {
        for entry in fs::read_dir(&folder).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                folders.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    let mut callers: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let code = code_of(&fs::read_to_string(file).unwrap());
        let module = file
            .strip_prefix(&src)
            .unwrap()
            .with_extension("")
            .to_string_lossy()
            .replace('\\', "/");
        // A module's own folder belongs to it (`machine/perform.rs` is the Machine controller).
        let module = ["controller/machine", "controller/windows_join"]
            .into_iter()
            .find(|owner| module == *owner || module.starts_with(&format!("{owner}/")))
            .map_or(module.clone(), str::to_owned);
        for (call, _, _) in WRITERS {
            let called = code.match_indices(call).any(|(at, _)| {
                !code[..at].ends_with("fn ")
                    && !code[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_')
            });
            if called {
                callers.entry(call).or_default().insert(module.clone());
            }
        }
    }
    for (call, owner, field) in WRITERS {
        let found = callers.get(call).cloned().unwrap_or_default();
        assert_eq!(
            found,
            BTreeSet::from([(*owner).to_owned()]),
            "{field} ({call}) is written from {found:?}, not from {owner} alone"
        );
    }
}
