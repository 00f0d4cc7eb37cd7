//! The crate's layering, checked: reads the `crate::…`, `super::…` and `self::…`
//! paths of every source file under `src/` and fails on an import cycle between
//! sibling modules (top-level layers, and the modules inside each layer), and on a
//! top-level import that points up the layer order of `docs/ARCHITECTURE.md`.
//!
//! A module's own `mod.rs` (or `lib.rs`) only declares and re-exports its
//! children, so its edges are not dependencies; a path through one of its
//! re-exports is followed to the child that defines the name. Test code
//! (`#[cfg(test)]` onwards) and comments are not read.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The top-level layers, highest first: a layer may import only layers after it.
const LAYERS: &[&[&str]] = &[
    &["runtime"],
    &["subagent"],
    &["agent"],
    // `tool` speaks the model's wire types (`ToolSpec`, `ToolCall`), nothing more.
    &["tool"],
    &["events", "model", "ledger"],
    // Certificate files, read alike by the provider's and the ledger's TLS.
    &["certs"],
];

/// A module path below the crate root (`["subagent", "drive"]`).
type ModPath = Vec<String>;

struct Source {
    /// The module the file is (`subagent/drive.rs` → `subagent::drive`).
    module: ModPath,
    /// Whether it is a `mod.rs`/`lib.rs` (declares children).
    is_dir_root: bool,
    /// Its code, test code and comments removed.
    code: String,
}

fn sources(root: &Path) -> Vec<Source> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(&dir)
            .expect("read src dir")
            .map(|e| e.expect("dir entry").path())
            .collect();
        entries.sort();
        for path in entries {
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().and_then(|e| e.to_str()) != Some("rs")
                || path.file_stem().and_then(|s| s.to_str()) == Some("import_graph")
            {
                continue;
            }
            let rel = path.strip_prefix(root).expect("under src");
            let mut module: ModPath = rel
                .parent()
                .map(|p| {
                    p.components()
                        .map(|c| c.as_os_str().to_string_lossy().into_owned())
                        .collect()
                })
                .unwrap_or_default();
            let stem = path
                .file_stem()
                .expect("file stem")
                .to_string_lossy()
                .into_owned();
            let is_dir_root = stem == "mod" || (stem == "lib" && module.is_empty());
            if !is_dir_root {
                module.push(stem);
            }
            let text = std::fs::read_to_string(&path).expect("read source");
            out.push(Source {
                module,
                is_dir_root,
                code: strip(&text),
            });
        }
    }
    out
}

/// The code of a file without comments and without its test code.
fn strip(text: &str) -> String {
    let mut code = String::new();
    for line in text.lines() {
        let t = line.trim_start();
        if t.starts_with("#[cfg(test)]") {
            break;
        }
        if t.starts_with("//") {
            continue;
        }
        let line = match line.find("//") {
            Some(i) if !line[..i].contains('"') => &line[..i],
            _ => line,
        };
        code.push_str(line);
        code.push('\n');
    }
    code
}

/// Every path the code names that starts at `crate`, `super` or `self`, with
/// `use` trees expanded (`super::{a, b::c}` → `super::a`, `super::b::c`).
fn paths(code: &str) -> Vec<Vec<String>> {
    let bytes: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let starts_word = i == 0 || !(bytes[i - 1].is_alphanumeric() || bytes[i - 1] == '_');
        let rest: String = bytes[i..bytes.len().min(i + 7)].iter().collect();
        if starts_word
            && (rest.starts_with("crate::")
                || rest.starts_with("super::")
                || rest.starts_with("self::"))
        {
            let (tree, end) = take_tree(&bytes, i);
            expand(&tree, &mut Vec::new(), &mut out);
            i = end;
        } else {
            i += 1;
        }
    }
    out
}

/// The text of one path or use tree starting at `i` (braces balanced), and where
/// it ends.
fn take_tree(chars: &[char], mut i: usize) -> (String, usize) {
    let mut depth = 0usize;
    let mut s = String::new();
    while i < chars.len() {
        let c = chars[i];
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => break,
            '}' => depth -= 1,
            c if depth == 0 && !(c.is_alphanumeric() || c == '_' || c == ':') => break,
            _ => {}
        }
        s.push(c);
        i += 1;
    }
    (s, i)
}

/// Expand a use tree into its paths (aliases and globs dropped to their path).
fn expand(tree: &str, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        let mut p = prefix.clone();
        let head = tree.split(" as ").next().unwrap_or(tree);
        p.extend(
            head.split("::")
                .map(str::trim)
                .filter(|s| !s.is_empty() && *s != "*")
                .map(str::to_string),
        );
        if !p.is_empty() {
            out.push(p);
        }
        return;
    };
    let base: Vec<String> = tree[..open]
        .split("::")
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect();
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let n = prefix.len();
    prefix.extend(base);
    let mut depth = 0usize;
    let mut start = 0;
    for (j, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                expand(&inner[start..j], prefix, out);
                start = j + 1;
            }
            _ => {}
        }
    }
    expand(&inner[start..], prefix, out);
    prefix.truncate(n);
}

/// `path` as written in `module`, made absolute (`super::x` in `a::b` → `a::x`).
fn absolute(module: &ModPath, path: &[String]) -> ModPath {
    // `self` of a file is its module; `super` of it is the enclosing one.
    let mut base: ModPath = module.clone();
    let mut rest = path;
    match rest.first().map(String::as_str) {
        Some("crate") => {
            base.clear();
            rest = &rest[1..];
        }
        Some("self") => rest = &rest[1..],
        _ => {}
    }
    while rest.first().map(String::as_str) == Some("super") {
        base.pop();
        rest = &rest[1..];
    }
    base.extend(rest.iter().cloned());
    base
}

struct Crate {
    /// Every module, as declared by a file.
    modules: BTreeSet<ModPath>,
    /// `(dir module, name)` → the child module a dir root re-exports `name` from.
    reexports: BTreeMap<(ModPath, String), ModPath>,
}

impl Crate {
    /// The module `path` names an item of: its longest prefix that is a module,
    /// following a dir root's re-export to the child defining the name.
    fn owner(&self, path: &ModPath) -> ModPath {
        let mut n = path.len();
        while n > 0 && !self.modules.contains(&path[..n]) {
            n -= 1;
        }
        let module = path[..n].to_vec();
        if let Some(name) = path.get(n) {
            if let Some(child) = self.reexports.get(&(module.clone(), name.clone())) {
                return child.clone();
            }
        }
        module
    }
}

/// Edges between modules, from each file's paths.
fn graph(root: &Path) -> (Crate, BTreeSet<(ModPath, ModPath)>) {
    let files = sources(root);
    let modules: BTreeSet<ModPath> = files.iter().map(|f| f.module.clone()).collect();
    let mut krate = Crate {
        modules,
        reexports: BTreeMap::new(),
    };
    // Re-exports of dir roots: `pub use child::{A, B}` → A, B come from child.
    for f in files.iter().filter(|f| f.is_dir_root) {
        for stmt in f.code.split(';') {
            let Some(tree) = stmt.trim().strip_prefix("pub use ") else {
                continue;
            };
            let mut found = Vec::new();
            let tree = if tree.starts_with("crate::")
                || tree.starts_with("self::")
                || tree.starts_with("super::")
            {
                tree.to_string()
            } else {
                format!("self::{tree}")
            };
            expand(&tree, &mut Vec::new(), &mut found);
            for p in found {
                let abs = absolute(&f.module, &p);
                let child = krate.owner(&abs);
                if let Some(name) = abs.last() {
                    if child.len() > f.module.len() && child.starts_with(&f.module) {
                        krate
                            .reexports
                            .insert((f.module.clone(), name.clone()), child);
                    }
                }
            }
        }
    }
    let mut edges = BTreeSet::new();
    for f in &files {
        for p in paths(&f.code) {
            let target = krate.owner(&absolute(&f.module, &p));
            // A dir root declaring or re-exporting its own children is structure.
            if f.is_dir_root && target.starts_with(&f.module) {
                continue;
            }
            if target != f.module {
                edges.insert((f.module.clone(), target));
            }
        }
    }
    (krate, edges)
}

/// Edges between the children of `parent` (each end cut to the child it lies in).
fn sibling_edges(
    edges: &BTreeSet<(ModPath, ModPath)>,
    parent: &ModPath,
) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let child = |m: &ModPath| -> Option<String> {
        (m.len() > parent.len() && m.starts_with(parent)).then(|| m[parent.len()].clone())
    };
    for (from, to) in edges {
        if let (Some(a), Some(b)) = (child(from), child(to)) {
            if a != b {
                out.entry(a).or_default().insert(b);
            }
        }
    }
    out
}

/// The groups of modules that import each other (directly or in a loop): the
/// strongly connected components of more than one module, each sorted.
fn cycles(g: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    let reach = |from: &str| -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.to_string()];
        while let Some(n) = todo.pop() {
            for m in g.get(&n).into_iter().flatten() {
                if seen.insert(m.clone()) {
                    todo.push(m.clone());
                }
            }
        }
        seen
    };
    let reachable: BTreeMap<&String, BTreeSet<String>> = g.keys().map(|n| (n, reach(n))).collect();
    let mut out: Vec<Vec<String>> = Vec::new();
    for (n, r) in &reachable {
        if !r.contains(*n) || out.iter().any(|c| c.contains(n)) {
            continue;
        }
        let group: Vec<String> = r
            .iter()
            .filter(|m| reachable.get(m).is_some_and(|back| back.contains(*n)))
            .cloned()
            .collect();
        out.push(group);
    }
    out
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn no_module_imports_another_that_imports_it() {
    let (krate, edges) = graph(&src());
    let mut parents: BTreeSet<ModPath> = krate
        .modules
        .iter()
        .filter_map(|m| m.split_last().map(|(_, p)| p.to_vec()))
        .collect();
    parents.insert(Vec::new());
    let mut found = Vec::new();
    for parent in &parents {
        for group in cycles(&sibling_edges(&edges, parent)) {
            found.push(format!(
                "crate::{}: {{{}}}",
                parent.join("::"),
                group.join(", ")
            ));
        }
    }
    assert!(
        found.is_empty(),
        "modules that import each other (directly or in a loop), by parent:\n{}",
        found.join("\n")
    );
}

#[test]
fn layers_import_only_downwards() {
    let (_, edges) = graph(&src());
    let rank = |m: &str| LAYERS.iter().position(|l| l.contains(&m));
    let mut wrong = Vec::new();
    for (from, tos) in sibling_edges(&edges, &Vec::new()) {
        for to in tos {
            match (rank(&from), rank(&to)) {
                (Some(a), Some(b)) if a < b => {}
                _ => wrong.push(format!("{from} → {to}")),
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports against the layer order {LAYERS:?}:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_reader_sees_use_trees_and_inline_paths() {
    let code = strip(
        "use super::{a, b::{C, d as e}};\n// crate::ignored\nfn f() { crate::x::y(); }\n\
         #[cfg(test)]\nmod tests { use crate::z; }\n",
    );
    let got: Vec<String> = paths(&code).iter().map(|p| p.join("::")).collect();
    assert_eq!(
        got,
        ["super::a", "super::b::C", "super::b::d", "crate::x::y"]
    );
    let mut g = BTreeMap::new();
    g.insert("a".to_string(), BTreeSet::from(["b".to_string()]));
    g.insert("b".to_string(), BTreeSet::from(["a".to_string()]));
    g.insert("c".to_string(), BTreeSet::from(["a".to_string()]));
    assert_eq!(cycles(&g), [["a", "b"]]);
}
