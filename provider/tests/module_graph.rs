//! The layers docs/architecture.md draws, held by the source itself. Each crate below is read as
//! the compiler reads it: from its root file, along its `mod` declarations, each file parsed
//! whole into its syntax tree, and test code (what `#[cfg(test)]` or a `#[test]` attribute
//! marks: a test module, a test file, a test function or import) dropped from that tree. In every
//! module with submodules, which submodule imports which: every path the code names (in `use`
//! declarations, types, expressions, patterns, macro calls), resolved through `super`, `self`,
//! imports, re-exports and glob imports to the module that defines it. A module never imports
//! one of a layer above its own, and no two modules import each other, directly or round a
//! longer loop. And each field the controllers write has one writer: the functions that build
//! or send its write are called from one module only.
//!
//! A module's own file (a `mod.rs`, `lib.rs`) is the package its submodules make up, not one of
//! them: a submodule may use what it defines.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use proc_macro2::{Delimiter, TokenStream, TokenTree};
use syn::punctuated::Punctuated;
use syn::visit::{self, Visit};
use syn::{Attribute, Item, Meta, Token, UseTree};

/// The crates read: a name, and the root file, from this package's folder.
const CRATES: &[(&str, &str)] = &[
    ("provider", "src/lib.rs"),
    ("plan", "plan/src/lib.rs"),
    ("prism-types", "../prism-client/types/src/lib.rs"),
    ("prism-client", "../prism-client/src/lib.rs"),
    ("prism-mock", "../hack/prism-mock/src/lib.rs"),
    ("sandbox", "../hack/sandbox/src/lib.rs"),
    ("kube-sim", "../hack/kube-sim/src/lib.rs"),
    ("k8s-semantics", "../hack/k8s-semantics/src/lib.rs"),
];

/// Layers within a package (crate, module path): its submodules by layer, lowest first; a
/// module may import its own layer and the ones below. Submodules not listed, and packages not
/// listed, take part in the cycle check only.
const LAYERS: &[(&str, &str, &[&[&str]])] = &[
    (
        "provider",
        "crate",
        &[
            &["metrics"],
            &["actuator"],
            &["controller", "render"],
            &["runtime"],
            &["cli_main"],
        ],
    ),
    (
        "provider",
        "crate::controller",
        &[
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
    ),
    (
        "provider",
        "crate::runtime",
        &[
            // The flags know no command.
            &["cli"],
            // Clients and the leader's election, which every command may use.
            &[
                "clients",
                "kube_client",
                "leader",
                "secret_changes",
                "server",
            ],
            &["validate"],
            &["doctor"],
        ],
    ),
    (
        "plan",
        "crate",
        &[
            &["api"],
            &["vm", "machineset"],
            &["machine"],
            &["windows_join", "doctor"],
        ],
    ),
    (
        "plan",
        "crate::machine::decide",
        &[
            // The one shared draft; each phase on it.
            &["draft"],
            &["environment", "claims"],
            &["create", "update"],
            &["delete"],
            // Observe's Prism-call economy, which reads what the delete recorded.
            &["economy"],
            &["observe"],
        ],
    ),
    // Prism's data: the shapes below what is made of them.
    (
        "prism-types",
        "crate",
        &[
            &["open_enum", "quote", "sensitive"],
            &["v3", "v4"],
            &["message"],
            &["task"],
            &["error"],
        ],
    ),
    // prism-mock's model never imports its HTTP layer.
    (
        "prism-mock",
        "crate",
        &[
            &["behaviour", "config", "faults", "seed", "store"],
            &["admin", "app", "errors", "server", "tls", "v3", "v4"],
        ],
    ),
    // The sandbox's control planes know none of the actors that run on them.
    ("sandbox", "crate", &[&["real_cluster"], &["node_agent"]]),
];

/// Imports (crate, package, module, import) every reading must find, each through another way
/// of naming (`use crate::...`, `super::`, a re-exported name, a path in an expression): a
/// checker that saw none would pass anything.
const KNOWN_IMPORTS: &[(&str, &str, &str, &str)] = &[
    ("provider", "crate", "runtime", "controller"),
    ("provider", "crate::controller", "machine", "shared"),
    ("provider", "crate::controller", "windows_join", "nodes"),
    ("provider", "crate::runtime", "doctor", "validate"),
    ("plan", "crate", "windows_join", "machine"),
    ("plan", "crate::machine", "decide", "snapshot"),
    ("plan", "crate::machine", "snapshot", "provision"),
    ("plan", "crate::machine::decide", "observe", "economy"),
    ("plan", "crate::machine::decide", "create", "draft"),
    ("prism-types", "crate", "task", "message"),
    ("prism-types", "crate", "error", "task"),
    ("prism-mock", "crate", "v3", "store"),
    ("prism-mock", "crate", "errors", "store"),
    ("sandbox", "crate", "world", "writes"),
    ("sandbox", "crate", "node_agent", "real_cluster"),
];

/// A module path, `crate` first: `["crate", "controller", "machine"]`.
type ModPath = Vec<String>;

/// A name a module brings into scope with `use`.
#[derive(Debug)]
enum Import {
    /// `use path as name;` (or `use path;`, named by its last segment).
    Name(String, Vec<String>),
    /// `use path::*;`
    Glob(Vec<String>),
}

/// One module of a crate, test code left out.
#[derive(Debug, Default)]
struct Module {
    /// Its submodules.
    children: BTreeSet<String>,
    /// The names of the items it defines.
    items: BTreeSet<String>,
    /// Its `use` declarations (those inside its functions too).
    imports: Vec<Import>,
    /// Every path it names, as written.
    paths: Vec<Vec<String>>,
    /// The names of the functions it calls or passes on (`f(..)`, `x.f(..)`, `m::f`).
    calls: BTreeSet<String>,
}

type Crate = BTreeMap<ModPath, Module>;

/// True when `attrs` mark test code: `#[test]` (or another `…::test` runner), or `#[cfg]` with
/// a predicate that needs `test`.
fn is_test(attrs: &[Attribute]) -> bool {
    fn needs_test(meta: &Meta) -> bool {
        match meta {
            Meta::Path(path) => path.is_ident("test"),
            Meta::List(list) if list.path.is_ident("all") => list
                .parse_args_with(Punctuated::<Meta, Token![,]>::parse_terminated)
                .is_ok_and(|predicates| predicates.iter().any(needs_test)),
            _ => false,
        }
    }
    attrs.iter().any(|attr| {
        let path = attr.path();
        path.segments
            .last()
            .is_some_and(|last| last.ident == "test")
            || (path.is_ident("cfg") && attr.parse_args::<Meta>().is_ok_and(|m| needs_test(&m)))
    })
}

fn item_attrs(item: &Item) -> &[Attribute] {
    match item {
        Item::Const(i) => &i.attrs,
        Item::Enum(i) => &i.attrs,
        Item::ExternCrate(i) => &i.attrs,
        Item::Fn(i) => &i.attrs,
        Item::ForeignMod(i) => &i.attrs,
        Item::Impl(i) => &i.attrs,
        Item::Macro(i) => &i.attrs,
        Item::Mod(i) => &i.attrs,
        Item::Static(i) => &i.attrs,
        Item::Struct(i) => &i.attrs,
        Item::Trait(i) => &i.attrs,
        Item::TraitAlias(i) => &i.attrs,
        Item::Type(i) => &i.attrs,
        Item::Union(i) => &i.attrs,
        Item::Use(i) => &i.attrs,
        _ => &[],
    }
}

/// The name an item defines, if one.
fn item_name(item: &Item) -> Option<String> {
    let ident = match item {
        Item::Const(i) => &i.ident,
        Item::Enum(i) => &i.ident,
        Item::Fn(i) => &i.sig.ident,
        Item::Macro(i) => i.ident.as_ref()?,
        Item::Static(i) => &i.ident,
        Item::Struct(i) => &i.ident,
        Item::Trait(i) => &i.ident,
        Item::TraitAlias(i) => &i.ident,
        Item::Type(i) => &i.ident,
        Item::Union(i) => &i.ident,
        _ => return None,
    };
    Some(ident.to_string())
}

/// The leaves of a `use` tree.
fn imports_of(tree: &UseTree, prefix: &mut Vec<String>, out: &mut Vec<Import>) {
    match tree {
        UseTree::Path(path) => {
            prefix.push(path.ident.to_string());
            imports_of(&path.tree, prefix, out);
            prefix.pop();
        }
        UseTree::Name(name) => {
            let name = name.ident.to_string();
            // `use a::b::{self}` names `a::b`.
            if name == "self" {
                if let Some(last) = prefix.last() {
                    out.push(Import::Name(last.clone(), prefix.clone()));
                }
            } else {
                let mut path = prefix.clone();
                path.push(name.clone());
                out.push(Import::Name(name, path));
            }
        }
        UseTree::Rename(rename) => {
            let mut path = prefix.clone();
            let original = rename.ident.to_string();
            if original != "self" {
                path.push(original);
            }
            out.push(Import::Name(rename.rename.to_string(), path));
        }
        UseTree::Glob(_) => out.push(Import::Glob(prefix.clone())),
        UseTree::Group(group) => {
            for tree in &group.items {
                imports_of(tree, prefix, out);
            }
        }
    }
}

/// Gathers what one module names, test code and nested modules left out (the nested modules are
/// kept aside, to be read as modules of their own).
struct Reader<'a, 'ast> {
    module: &'a mut Module,
    nested: Vec<&'ast syn::ItemMod>,
}

impl Reader<'_, '_> {
    /// The paths in a macro's tokens (`a::b::c`, `crate::x`), and the calls (`f(...)`).
    fn tokens(&mut self, tokens: TokenStream) {
        let trees: Vec<TokenTree> = tokens.into_iter().collect();
        let colon = |tree: Option<&TokenTree>| matches!(tree, Some(TokenTree::Punct(punct)) if punct.as_char() == ':');
        let mut at = 0;
        while at < trees.len() {
            match &trees[at] {
                TokenTree::Group(group) => {
                    self.tokens(group.stream());
                    at += 1;
                }
                TokenTree::Ident(ident) => {
                    let after_colons =
                        at >= 2 && colon(trees.get(at - 1)) && colon(trees.get(at - 2));
                    let mut path = vec![ident.to_string()];
                    at += 1;
                    while colon(trees.get(at)) && colon(trees.get(at + 1)) {
                        let Some(TokenTree::Ident(next)) = trees.get(at + 2) else {
                            break;
                        };
                        path.push(next.to_string());
                        at += 3;
                    }
                    if matches!(trees.get(at), Some(TokenTree::Group(g)) if g.delimiter() == Delimiter::Parenthesis)
                    {
                        self.module.calls.insert(path.last().unwrap().clone());
                    }
                    // `::x` (an outside crate) or `$crate::x`'s continuation is read from its
                    // start.
                    if !after_colons {
                        self.module.paths.push(path);
                    }
                }
                _ => at += 1,
            }
        }
    }
}

impl<'ast> Visit<'ast> for Reader<'_, 'ast> {
    fn visit_item(&mut self, item: &'ast Item) {
        if is_test(item_attrs(item)) {
            return;
        }
        match item {
            Item::Mod(module) => {
                self.module.children.insert(module.ident.to_string());
                self.nested.push(module);
                return;
            }
            Item::Use(declaration) => {
                let mut imports = Vec::new();
                imports_of(&declaration.tree, &mut Vec::new(), &mut imports);
                for import in &imports {
                    let path = match import {
                        Import::Name(_, path) | Import::Glob(path) => path,
                    };
                    self.module.paths.push(path.clone());
                }
                self.module.imports.extend(imports);
                return;
            }
            _ => {}
        }
        if let Some(name) = item_name(item) {
            self.module.items.insert(name);
        }
        visit::visit_item(self, item);
    }

    fn visit_impl_item(&mut self, item: &'ast syn::ImplItem) {
        let attrs = match item {
            syn::ImplItem::Const(i) => &i.attrs,
            syn::ImplItem::Fn(i) => &i.attrs,
            syn::ImplItem::Type(i) => &i.attrs,
            syn::ImplItem::Macro(i) => &i.attrs,
            _ => return visit::visit_impl_item(self, item),
        };
        if !is_test(attrs) {
            visit::visit_impl_item(self, item);
        }
    }

    fn visit_trait_item(&mut self, item: &'ast syn::TraitItem) {
        let attrs = match item {
            syn::TraitItem::Const(i) => &i.attrs,
            syn::TraitItem::Fn(i) => &i.attrs,
            syn::TraitItem::Type(i) => &i.attrs,
            syn::TraitItem::Macro(i) => &i.attrs,
            _ => return visit::visit_trait_item(self, item),
        };
        if !is_test(attrs) {
            visit::visit_trait_item(self, item);
        }
    }

    fn visit_field(&mut self, field: &'ast syn::Field) {
        if !is_test(&field.attrs) {
            visit::visit_field(self, field);
        }
    }

    fn visit_variant(&mut self, variant: &'ast syn::Variant) {
        if !is_test(&variant.attrs) {
            visit::visit_variant(self, variant);
        }
    }

    fn visit_local(&mut self, local: &'ast syn::Local) {
        if !is_test(&local.attrs) {
            visit::visit_local(self, local);
        }
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        if path.leading_colon.is_none() {
            self.module
                .paths
                .push(path.segments.iter().map(|s| s.ident.to_string()).collect());
        }
        visit::visit_path(self, path);
    }

    fn visit_expr_path(&mut self, expr: &'ast syn::ExprPath) {
        if let Some(last) = expr.path.segments.last() {
            self.module.calls.insert(last.ident.to_string());
        }
        visit::visit_expr_path(self, expr);
    }

    fn visit_expr_method_call(&mut self, call: &'ast syn::ExprMethodCall) {
        self.module.calls.insert(call.method.to_string());
        visit::visit_expr_method_call(self, call);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        self.tokens(mac.tokens.clone());
        visit::visit_macro(self, mac);
    }
}

/// Reads module `path`, written in `file` with `items`, and the modules below it; `dir` is the
/// folder of its submodules' files.
fn read_module(
    krate: &mut Crate,
    path: ModPath,
    file: &Path,
    dir: &Path,
    items: &[Item],
    source: &dyn Fn(&Path) -> Option<String>,
) {
    let mut module = Module::default();
    let mut reader = Reader {
        module: &mut module,
        nested: Vec::new(),
    };
    for item in items {
        reader.visit_item(item);
    }
    let nested = reader.nested;
    krate.insert(path.clone(), module);
    for child in nested {
        let name = child.ident.to_string();
        let mut child_path = path.clone();
        child_path.push(name.clone());
        let child_dir = dir.join(&name);
        if let Some((_, items)) = &child.content {
            read_module(krate, child_path, file, &child_dir, items, source);
            continue;
        }
        let explicit = child.attrs.iter().find_map(|attr| match &attr.meta {
            Meta::NameValue(value) if attr.path().is_ident("path") => match &value.value {
                syn::Expr::Lit(syn::ExprLit {
                    lit: syn::Lit::Str(text),
                    ..
                }) => Some(file.parent().unwrap().join(text.value())),
                _ => None,
            },
            _ => None,
        });
        let candidates = match explicit {
            Some(file) => vec![file],
            None => vec![dir.join(format!("{name}.rs")), child_dir.join("mod.rs")],
        };
        let found = candidates
            .iter()
            .find_map(|candidate| Some((candidate, source(candidate)?)));
        let Some((child_file, text)) = found else {
            panic!("{}: mod {name}: none of {candidates:?}", file.display());
        };
        let parsed =
            syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", child_file.display()));
        // Written as `name.rs` or as `name/mod.rs`, its own submodules are in `name/`.
        read_module(
            krate,
            child_path,
            child_file,
            &child_dir,
            &parsed.items,
            source,
        );
    }
}

fn read_crate(root: &Path, source: &dyn Fn(&Path) -> Option<String>) -> Crate {
    let text = source(root).unwrap_or_else(|| panic!("{}: unreadable", root.display()));
    let parsed = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", root.display()));
    let mut krate = Crate::new();
    read_module(
        &mut krate,
        vec!["crate".to_owned()],
        root,
        root.parent().unwrap(),
        &parsed.items,
        source,
    );
    krate
}

/// What a name in a module's scope is.
enum Named {
    Module(ModPath),
    /// An item that module defines.
    Item(ModPath),
    /// An import: its path, as written in that module.
    Import(ModPath, Vec<String>),
}

/// Guards a resolution against imports that lead round in a loop.
const MAX_DEPTH: usize = 16;

fn lookup(krate: &Crate, module: &ModPath, name: &str, depth: usize) -> Option<Named> {
    let found = krate.get(module)?;
    if found.children.contains(name) {
        let mut path = module.clone();
        path.push(name.to_owned());
        return Some(Named::Module(path));
    }
    for import in &found.imports {
        if let Import::Name(imported, path) = import
            && imported == name
        {
            return Some(Named::Import(module.clone(), path.clone()));
        }
    }
    if found.items.contains(name) {
        return Some(Named::Item(module.clone()));
    }
    if depth >= MAX_DEPTH {
        return None;
    }
    found.imports.iter().find_map(|import| match import {
        Import::Glob(path) => match resolve(krate, module, path, depth + 1)? {
            (source, rest) if rest.is_empty() => lookup(krate, &source, name, depth + 1),
            _ => None,
        },
        Import::Name(..) => None,
    })
}

/// The module a path names, written in `from`: the deepest module it reaches, and the segments
/// left after it. `None` when it names another crate's (or nothing this crate defines).
fn resolve(
    krate: &Crate,
    from: &ModPath,
    path: &[String],
    depth: usize,
) -> Option<(ModPath, Vec<String>)> {
    if depth >= MAX_DEPTH {
        return None;
    }
    let (first, rest) = path.split_first()?;
    let mut at = match first.as_str() {
        "crate" => vec!["crate".to_owned()],
        "self" => from.clone(),
        "super" => from[..from.len().checked_sub(1)?].to_vec(),
        _ => match lookup(krate, from, first, depth)? {
            Named::Module(module) => module,
            Named::Item(module) => return Some((module, path.to_vec())),
            Named::Import(module, target) => {
                let (reached, left) = resolve(krate, &module, &target, depth + 1)?;
                return continue_from(krate, reached, left, rest, depth);
            }
        },
    };
    let mut rest = rest;
    while let Some((next, after)) = rest.split_first() {
        if next == "super" {
            at.pop();
            rest = after;
            continue;
        }
        match lookup(krate, &at, next, depth) {
            Some(Named::Module(module)) => at = module,
            Some(Named::Import(module, target)) => {
                let (reached, left) = resolve(krate, &module, &target, depth + 1)?;
                return continue_from(krate, reached, left, after, depth);
            }
            Some(Named::Item(_)) | None => return Some((at, rest.to_vec())),
        }
        rest = after;
    }
    Some((at, Vec::new()))
}

/// Goes on from what an import reached (`reached`, and what was left of its path) with the rest
/// of the path that named it.
fn continue_from(
    krate: &Crate,
    reached: ModPath,
    left: Vec<String>,
    rest: &[String],
    depth: usize,
) -> Option<(ModPath, Vec<String>)> {
    if !left.is_empty() || rest.is_empty() {
        let mut left = left;
        left.extend_from_slice(rest);
        return Some((reached, left));
    }
    let mut path = vec!["self".to_owned()];
    path.extend_from_slice(rest);
    resolve(krate, &reached, &path, depth + 1)
}

/// For every module with submodules: which of them imports which.
fn graphs(krate: &Crate) -> BTreeMap<ModPath, BTreeMap<String, BTreeSet<String>>> {
    let mut graphs: BTreeMap<ModPath, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for (path, module) in krate {
        if !module.children.is_empty() {
            let graph = graphs.entry(path.clone()).or_default();
            for child in &module.children {
                graph.entry(child.clone()).or_default();
            }
        }
    }
    for (from, module) in krate {
        for named in &module.paths {
            let Some((target, _)) = resolve(krate, from, named, 0) else {
                continue;
            };
            let shared = from.iter().zip(&target).take_while(|(a, b)| a == b).count();
            if shared < from.len() && shared < target.len() {
                graphs
                    .entry(from[..shared].to_vec())
                    .or_default()
                    .entry(from[shared].clone())
                    .or_default()
                    .insert(target[shared].clone());
            }
        }
    }
    graphs
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

fn from_disk(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

fn read(root: &str) -> Crate {
    read_crate(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join(root),
        &from_disk,
    )
}

/// Every broken layer and every loop of `graphs`, one line each.
fn problems_of(
    name: &str,
    graphs: &BTreeMap<ModPath, BTreeMap<String, BTreeSet<String>>>,
) -> Vec<String> {
    let mut problems = Vec::new();
    for (package, graph) in graphs {
        let package = package.join("::");
        let layers = LAYERS
            .iter()
            .find(|(krate, path, _)| *krate == name && *path == package)
            .map_or(&[][..], |(_, _, layers)| *layers);
        let layer_of = |module: &str| layers.iter().position(|layer| layer.contains(&module));
        for (module, imports) in graph {
            for import in imports {
                if let (Some(own), Some(other)) = (layer_of(module), layer_of(import))
                    && other > own
                {
                    problems.push(format!(
                        "{name} {package}: {module} imports {import}, a layer above it"
                    ));
                }
            }
        }
        for cycle in cycles(graph) {
            problems.push(format!(
                "{name} {package}: import cycle {} -> {}",
                cycle.join(" -> "),
                cycle[0]
            ));
        }
    }
    problems
}

#[test]
fn no_module_imports_a_layer_above_it_or_one_that_imports_it_back() {
    let mut problems = Vec::new();
    for (name, root) in CRATES {
        let krate = read(root);
        assert!(krate.len() > 1, "{name}: no modules found");
        let graphs = graphs(&krate);
        let graph_of = |package: &str| {
            graphs
                .iter()
                .find(|(path, _)| path.join("::") == package)
                .map(|(_, graph)| graph)
        };
        for (_, package, layers) in LAYERS.iter().filter(|(k, _, _)| k == name) {
            let Some(graph) = graph_of(package) else {
                problems.push(format!(
                    "{name}: a layer is given for {package}, no package"
                ));
                continue;
            };
            for module in layers.iter().copied().flatten() {
                if !graph.contains_key(*module) {
                    problems.push(format!(
                        "{name} {package}: a layer names {module}, no module of it"
                    ));
                }
            }
        }
        for (_, package, module, import) in KNOWN_IMPORTS.iter().filter(|(k, ..)| k == name) {
            if !graph_of(package)
                .and_then(|graph| graph.get(*module))
                .is_some_and(|imports| imports.contains(*import))
            {
                problems.push(format!(
                    "{name} {package}: {module} imports {import}, unseen"
                ));
            }
        }
        problems.extend(problems_of(name, &graphs));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The reading itself: a whole file (test code in its middle, not only at its end), imports
/// through a re-export, a glob, `super`, a macro's tokens, a path in an expression; no test
/// code, comment or string; and a loop found.
#[test]
fn the_checker_reads_whole_files_without_their_tests_and_sees_loops() {
    let files: BTreeMap<PathBuf, &str> = [
        (
            "lib.rs",
            "mod a; mod b; mod c; mod d; pub use c::Thing; #[cfg(test)] mod tests;",
        ),
        // A test module first, the import after it; comments and strings name no module.
        (
            "a.rs",
            "#[cfg(test)] mod tests { use crate::b::X; }\n\
             // crate::d::f()\n\
             /// crate::d::g\n\
             fn f() { let _ = \"crate::d::h\"; }\n\
             use crate::Thing;",
        ),
        // A path in a macro's tokens.
        ("b.rs", "fn g() { println!(\"{}\", crate::a::value(1)); }"),
        // Test code of every kind, and a glob import of the parent's names.
        (
            "c.rs",
            "#[cfg(test)] use crate::b::Y;\n\
             #[test] fn t() { crate::b::z(); }\n\
             #[cfg(all(test, unix))] fn u() { crate::d::z(); }\n\
             #[tokio::test] async fn v() { crate::b::z(); }\n\
             pub struct Thing;\n\
             mod inner { use super::super::*; fn w() -> Option<Thing> { None } }",
        ),
        // `super::`, a path in an expression, a submodule in a folder.
        ("d.rs", "mod e; fn f() { super::b::g(); }"),
        ("d/e.rs", "fn h() -> crate::c::Thing { todo!() }"),
        ("tests.rs", "use crate::d::f;"),
    ]
    .into_iter()
    .map(|(file, text)| (PathBuf::from("/x").join(file), text))
    .collect();
    let source = |path: &Path| files.get(path).map(|text| (*text).to_owned());
    let krate = read_crate(Path::new("/x/lib.rs"), &source);
    let graphs = graphs(&krate);
    let root = &graphs[&vec!["crate".to_owned()]];
    let expected: BTreeMap<String, BTreeSet<String>> = [
        ("a", vec!["c"]),
        ("b", vec!["a"]),
        ("c", vec![]),
        ("d", vec!["b", "c"]),
    ]
    .into_iter()
    .map(|(m, i)| (m.to_owned(), i.into_iter().map(str::to_owned).collect()))
    .collect();
    assert_eq!(root, &expected);
    assert!(cycles(root).is_empty());
    assert!(!krate.contains_key(&vec!["crate".to_owned(), "tests".to_owned()]));
    assert!(
        krate[&vec!["crate".to_owned(), "b".to_owned()]]
            .calls
            .contains("value")
    );

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
}

/// Each field and the one module (below the provider's `src/`) whose code may call what writes
/// it.
const WRITERS: &[(&str, &str, &str)] = &[
    // The Node's spec.providerID.
    (
        "set_provider_id",
        "controller/machine",
        "the Node's providerID",
    ),
    // Every Machine field the Machine controller owns (phase, providerStatus but windowsJoin,
    // addresses, conditions, labels, annotations, providerID, finalizer).
    ("status_patch", "controller/machine", "the Machine's status"),
    (
        "metadata_patch",
        "controller/machine",
        "the Machine's metadata",
    ),
    // providerStatus.windowsJoin.
    (
        "condition_patch",
        "controller/windows_join",
        "providerStatus.windowsJoin",
    ),
];

#[test]
fn each_field_has_one_writer() {
    let krate = read("src/lib.rs");
    let mut callers: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for (path, module) in &krate {
        let name = path[1..].join("/");
        // A module's own submodules belong to it (`machine/perform.rs` is the Machine
        // controller).
        let name = ["controller/machine", "controller/windows_join"]
            .into_iter()
            .find(|owner| name == *owner || name.starts_with(&format!("{owner}/")))
            .map_or(name.clone(), str::to_owned);
        for (call, _, _) in WRITERS {
            if module.calls.contains(*call) {
                callers.entry(call).or_default().insert(name.clone());
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
