//! JSON Schema checks for integration tests: `mod common;` then
//! `common::schema::assert_valid("control-message.json", &value)`.
//!
//! Schemas are read from `schemas/` under the crate root. A `schema_file` that is an absolute
//! path is used as is, which is how tests reach the reference's copies of the protocol's
//! schemas when they are here (see `fixtures.rs`).
//!
//! Validators are draft 2020-12 with `format` asserted (not only annotated), so
//! `"format": "date-time"` and `"format": "uri"` are checked too. Compiled validators are
//! cached per path for the life of the test binary.
#![allow(dead_code)]

use jsonschema::Validator;
use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

/// `schemas/` in this crate.
pub fn schema_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../schemas")
}

/// Where `schema_file` is read from: `schemas/<schema_file>`, or the path itself when absolute.
pub fn schema_path(schema_file: &str) -> PathBuf {
    schema_dir().join(schema_file)
}

/// Reads and parses a JSON file, panicking with the path on failure.
pub fn load_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
}

/// Compiles a schema document as draft 2020-12 with format assertion on. The document is
/// also checked against the draft 2020-12 meta-schema.
pub fn compile(schema: &Value) -> Result<Validator, String> {
    jsonschema::draft202012::meta::validate(schema).map_err(|e| {
        format!(
            "not a valid draft 2020-12 schema: {e} at {}",
            e.instance_path
        )
    })?;
    jsonschema::draft202012::options()
        .should_validate_formats(true)
        .build(schema)
        .map_err(|e| format!("does not compile: {e}"))
}

/// The compiled validator for `schema_file`, cached.
pub fn validator(schema_file: &str) -> Arc<Validator> {
    static CACHE: OnceLock<Mutex<HashMap<PathBuf, Arc<Validator>>>> = OnceLock::new();
    let path = schema_path(schema_file);
    let cache = CACHE.get_or_init(Default::default);
    if let Some(v) = cache.lock().unwrap_or_else(|e| e.into_inner()).get(&path) {
        return Arc::clone(v);
    }
    let compiled =
        compile(&load_json(&path)).unwrap_or_else(|e| panic!("schema {}: {e}", path.display()));
    let compiled = Arc::new(compiled);
    cache
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(path, Arc::clone(&compiled));
    compiled
}

/// Every validation error, one line each: `<instance path>: <message> (schema <schema path>)`.
/// Empty when `instance` is valid.
pub fn errors(schema_file: &str, instance: &Value) -> Vec<String> {
    let v = validator(schema_file);
    v.iter_errors(instance)
        .map(|e| {
            let at = e.instance_path.to_string();
            let at = if at.is_empty() { "/".to_string() } else { at };
            format!("{at}: {e} (schema {})", e.schema_path)
        })
        .collect()
}

pub fn is_valid(schema_file: &str, instance: &Value) -> bool {
    validator(schema_file).is_valid(instance)
}

/// Panics listing every error when `instance` does not satisfy `schema_file`.
pub fn assert_valid(schema_file: &str, instance: &Value) {
    let errs = errors(schema_file, instance);
    if !errs.is_empty() {
        panic!(
            "instance is not valid under {schema_file}:\n  {}\ninstance: {}",
            errs.join("\n  "),
            serde_json::to_string_pretty(instance).unwrap_or_default()
        );
    }
}

/// Panics when `instance` unexpectedly satisfies `schema_file`.
pub fn assert_invalid(schema_file: &str, instance: &Value) {
    if is_valid(schema_file, instance) {
        panic!(
            "instance is unexpectedly valid under {schema_file}: {}",
            serde_json::to_string_pretty(instance).unwrap_or_default()
        );
    }
}
