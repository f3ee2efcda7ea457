//! The dependency rule of `pipeline/src`, checked on the source: every `crate::…`, `super::…`
//! and `self::…` path (in `use` declarations and inline; comments and test code left out) is an
//! edge from the file that writes it to the module it names.
//!
//! 1. Layers: each component (a top-level module; for `stages`, each stage folder, the driver
//!    and the folder's `mod.rs`) imports only the components its row of [`ALLOWED`] names — the
//!    bottom layer `core` nothing, stages never one another.
//! 2. No cycles between files, where a folder's `mod.rs` and the files inside it are parent and
//!    children: the parent declares and re-exports its children and the children use what the
//!    parent defines for all of them, so edges between a file and its ancestors are not counted;
//!    every other edge must leave the file graph acyclic.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Which components a component may import (besides itself).
const ALLOWED: &[(&str, &[&str])] = &[
    ("core", &[]),
    ("io", &["core"]),
    ("rules", &["core"]),
    ("llm", &["core", "io"]),
    ("models", &["core", "io", "llm"]),
    ("stages", &["stages::driver"]),
    ("stages::driver", &["core", "io"]),
    ("stages::*", &["core", "io", "llm", "rules", "models", "stages", "stages::driver"]),
    ("query", &["core", "io", "llm", "rules", "models"]),
    ("config", &["core", "io", "llm", "models", "query", "stages::*"]),
    ("compose", &["core", "io", "llm", "models", "query", "config", "stages", "stages::driver", "stages::*"]),
    ("eval", &["core", "io", "llm", "query", "config", "compose", "stages"]),
];

/// Module path (`query::strategy`) of every source file.
fn modules(src: &Path) -> BTreeMap<Vec<String>, PathBuf> {
    fn walk(dir: &Path, src: &Path, out: &mut BTreeMap<Vec<String>, PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, src, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let rel = path.strip_prefix(src).unwrap().with_extension("");
                let mut segments: Vec<String> = rel.iter().map(|s| s.to_string_lossy().into_owned()).collect();
                if segments.last().is_some_and(|s| s == "mod" || s == "lib") {
                    segments.pop();
                }
                out.insert(segments, path);
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(src, src, &mut out);
    out
}

/// The source without comments (whole-line and trailing `//` comments) and without its inline
/// test module (`#[cfg(test)] mod tests { … }`, which is not part of the library's build; a
/// `tests.rs` file of its own is checked like any child file).
fn code(text: &str) -> String {
    let inline_tests = text.match_indices("#[cfg(test)]").map(|(i, _)| i).find(|&i| {
        let after =
            text[i + "#[cfg(test)]".len()..].lines().map(str::trim).find(|l| !l.is_empty() && !l.starts_with("#["));
        after == Some("mod tests {")
    });
    let library = &text[..inline_tests.unwrap_or(text.len())];
    library
        .lines()
        .map(|line| {
            let trimmed = line.trim_start();
            if trimmed.starts_with("//") {
                return "";
            }
            // A trailing comment starts at `// ` outside a string (good enough for this code base:
            // strings holding `// ` followed by a path do not occur).
            match line.find(" // ") {
                Some(i) if !line[..i].contains('"') => &line[..i],
                _ => line,
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every path that starts with `crate`, `super` or `self`, as written (use groups expanded).
fn paths(code: &str) -> Vec<Vec<String>> {
    let chars: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    let ident_at = |i: usize| -> Option<(String, usize)> {
        let mut j = i;
        while j < chars.len() && (chars[j].is_alphanumeric() || chars[j] == '_') {
            j += 1;
        }
        (j > i).then(|| (chars[i..j].iter().collect(), j))
    };
    while i < chars.len() {
        let boundary = i == 0 || !(chars[i - 1].is_alphanumeric() || chars[i - 1] == '_' || chars[i - 1] == ':');
        if boundary && let Some((word, end)) = ident_at(i) {
            if matches!(word.as_str(), "crate" | "super" | "self") && chars.get(end..end + 2) == Some(&[':', ':']) {
                let mut prefix = vec![word];
                i = parse_tree(&chars, end + 2, &mut prefix, &mut out);
                continue;
            }
            i = end;
            continue;
        }
        i += 1;
    }
    out
}

/// Parses a use tree after `prefix::`; returns the position after it.
fn parse_tree(chars: &[char], mut i: usize, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) -> usize {
    let skip_ws = |mut i: usize| {
        while i < chars.len() && chars[i].is_whitespace() {
            i += 1;
        }
        i
    };
    i = skip_ws(i);
    if chars.get(i) == Some(&'{') {
        i += 1;
        loop {
            i = skip_ws(i);
            match chars.get(i) {
                Some('}') => return i + 1,
                Some(',') => i += 1,
                None => return i,
                _ => {
                    let mut inner = prefix.clone();
                    i = parse_tree(chars, i, &mut inner, out);
                }
            }
        }
    }
    let start = i;
    while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
        i += 1;
    }
    if i == start {
        out.push(prefix.clone());
        return i;
    }
    prefix.push(chars[start..i].iter().collect());
    if chars.get(i..i + 2) == Some(&[':', ':']) {
        return parse_tree(chars, i + 2, prefix, out);
    }
    out.push(prefix.clone());
    i
}

/// The module a path written in `from` names: the longest prefix of the absolute path that is a
/// module with a file.
fn resolve(from: &[String], path: &[String], known: &BTreeMap<Vec<String>, PathBuf>) -> Option<Vec<String>> {
    let mut absolute: Vec<String> = Vec::new();
    let mut rest = path;
    match path.first().map(String::as_str) {
        Some("crate") => rest = &path[1..],
        Some("self") => {
            absolute = from.to_vec();
            rest = &path[1..];
        }
        Some("super") => {
            absolute = from.to_vec();
            while rest.first().is_some_and(|s| s == "super") {
                absolute.pop()?;
                rest = &rest[1..];
            }
        }
        _ => return None,
    }
    absolute.extend(rest.iter().cloned());
    (0..=absolute.len()).rev().map(|n| absolute[..n].to_vec()).find(|m| known.contains_key(m))
}

/// The component of a module: its top-level module, or for `stages` the folder's own file, the
/// driver, or a stage folder (`stages::*` in [`ALLOWED`]).
fn component(module: &[String]) -> String {
    match module {
        [] => "crate".into(),
        [top] => top.clone(),
        [top, second, ..] if top == "stages" => format!("stages::{second}"),
        [top, ..] => top.clone(),
    }
}

fn allowed(from: &str, to: &str) -> bool {
    let rule = |name: &str| -> Option<&&[&str]> {
        ALLOWED.iter().find(|(c, _)| *c == name).map(|(_, a)| a).or_else(|| {
            (name.starts_with("stages::") && name != "stages::driver")
                .then(|| ALLOWED.iter().find(|(c, _)| *c == "stages::*").map(|(_, a)| a))
                .flatten()
        })
    };
    let Some(allowed) = rule(from) else { return false };
    let is_stage = to.starts_with("stages::") && to != "stages::driver";
    allowed.iter().any(|a| *a == to || (*a == "stages::*" && is_stage))
}

#[test]
fn the_layers_hold_and_no_file_imports_in_a_cycle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let known = modules(&src);
    let mut edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    let mut violations = Vec::new();
    // Test code (an inline `mod tests` or a `tests` file) may use anything its module tests.
    for (module, file) in known.iter().filter(|(module, _)| !module.iter().any(|s| s == "tests")) {
        let text = code(&std::fs::read_to_string(file).unwrap());
        for path in paths(&text) {
            let Some(target) = resolve(module, &path, &known) else { continue };
            if &target == module {
                continue;
            }
            let (from, to) = (component(module), component(&target));
            if from != to && from != "crate" && !allowed(&from, &to) {
                violations.push(format!("{} ({from}) imports {} ({to})", module.join("::"), path.join("::")));
            }
            // Parent and child files of a folder are one unit for the cycle check.
            let related = target.starts_with(module) || module.starts_with(&target);
            if !related {
                edges.entry(module.clone()).or_default().insert(target);
            }
        }
    }
    assert!(violations.is_empty(), "the dependency rule is broken:\n{}", violations.join("\n"));

    // Depth-first search for a cycle among the files.
    fn visit(
        node: &Vec<String>,
        edges: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        state: &mut BTreeMap<Vec<String>, u8>,
        stack: &mut Vec<Vec<String>>,
    ) -> Option<Vec<Vec<String>>> {
        match state.get(node) {
            Some(2) => return None,
            Some(1) => {
                let start = stack.iter().position(|n| n == node).unwrap_or(0);
                return Some(stack[start..].to_vec());
            }
            _ => {}
        }
        state.insert(node.clone(), 1);
        stack.push(node.clone());
        for next in edges.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, edges, state, stack) {
                return Some(cycle);
            }
        }
        stack.pop();
        state.insert(node.clone(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for node in known.keys() {
        let cycle = visit(node, &edges, &mut state, &mut Vec::new());
        assert!(
            cycle.is_none(),
            "import cycle: {}",
            cycle.unwrap_or_default().iter().map(|m| m.join("::")).collect::<Vec<_>>().join(" → ")
        );
    }
}

#[test]
fn the_checker_sees_what_it_must() {
    let text = "use crate::{core::ids::x, io::{a, b}};\nuse super::driver::Run;\n// use crate::eval::x;\nlet y = crate::rules::mentions(t);";
    let found = paths(&code(text));
    let written: Vec<String> = found.iter().map(|p| p.join("::")).collect();
    assert_eq!(
        written,
        ["crate::core::ids::x", "crate::io::a", "crate::io::b", "super::driver::Run", "crate::rules::mentions"]
    );
    let known: BTreeMap<Vec<String>, PathBuf> =
        [vec![], vec!["stages".into()], vec!["stages".into(), "driver".into()], vec!["stages".into(), "chunk".into()]]
            .into_iter()
            .map(|m| (m, PathBuf::new()))
            .collect();
    let from = vec!["stages".to_owned(), "chunk".to_owned()];
    let target = resolve(&from, &["super".into(), "driver".into(), "Run".into()], &known).unwrap();
    assert_eq!(component(&target), "stages::driver");
    assert!(
        allowed("stages::chunk", "stages::driver")
            && !allowed("stages::chunk", "stages::graph")
            && !allowed("core", "io")
    );
    assert!(
        allowed("config", "stages::chunk") && !allowed("query", "stages::embed") && !allowed("eval", "stages::merge")
    );
}
