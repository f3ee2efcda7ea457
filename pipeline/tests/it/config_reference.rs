//! The configuration reference page is the code's: `docs/configuration-reference.md` equals what
//! `config::reference` generates from the configuration structs and their doc comments. After a
//! change to the configuration, rewrite it with
//! `FLEXSTRUCT_DOCS_WRITE=1 cargo test -p flexstruct-pipeline --test it config_reference`.

use std::path::Path;

use flexstruct_pipeline::config::{Config, reference};

#[test]
fn the_reference_page_is_generated_from_the_code() {
    let page = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/configuration-reference.md");
    let generated = reference();
    if std::env::var_os("FLEXSTRUCT_DOCS_WRITE").is_some() {
        std::fs::write(&page, &generated).unwrap();
    }
    let written = std::fs::read_to_string(&page).unwrap_or_default();
    assert!(
        written == generated,
        "{} is not what the code generates; rewrite it with \
         FLEXSTRUCT_DOCS_WRITE=1 cargo test -p flexstruct-pipeline --test it config_reference",
        page.display()
    );
}

#[test]
fn every_key_of_the_defaults_is_in_the_reference() {
    let page = reference();
    let defaults = serde_json::to_value(Config::default()).unwrap();
    let mut missing = Vec::new();
    for (section, keys) in defaults.as_object().unwrap() {
        assert!(page.contains(&format!("## [{section}]")), "section [{section}] is missing");
        for key in keys.as_object().into_iter().flatten().map(|(k, _)| k) {
            if !page.contains(&format!("| `{key}` |")) && !page.contains(&format!("## [{section}.{key}]")) {
                missing.push(format!("{section}.{key}"));
            }
        }
    }
    assert!(missing.is_empty(), "keys missing from the reference: {missing:?}");
}
