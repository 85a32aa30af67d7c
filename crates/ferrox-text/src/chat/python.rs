//! What `transformers` gives chat templates beyond Jinja, and where Python's
//! jinja2 behaves otherwise than minijinja, made to behave as jinja2 does
//! (`tests/templates/test_jinja2.py` compares every llama.cpp template with
//! jinja2 itself):
//!
//! * `tojson` is `json.dumps` (Python's separators, no HTML escaping, `indent`,
//!   `separators`, `sort_keys`);
//! * `strftime_now` is `datetime.now().strftime`;
//! * the `{% generation %}` tag of `transformers`' assistant-mask extension
//!   renders its body;
//! * a top-level `None` (`tools` when none are offered, `documents`) is Python's
//!   `None`: false, printed `None`, `is none`, not iterable (a `for` over it or
//!   its `length` is an error, as in jinja2), where minijinja's `none` iterates
//!   as empty;
//! * `none`, `true` and `false` print as Python prints them (`None`, `True`,
//!   `False`).
//!
//! Known differences that remain, both in how jinja2 treats one-shot values:
//! markupsafe's `Markup + str` escapes the `str` (`"a"|safe + s`), and
//! `tojson` of a `map(...)` generator is an error in jinja2; minijinja does
//! neither.

use std::sync::Arc;

use minijinja::value::{Kwargs, Object};
use minijinja::{Environment, Error, ErrorKind, Output, State, Value};
use serde::Serialize;

/// `tojson` as `transformers` defines it: `json.dumps` without HTML escaping and
/// with non-ASCII kept, taking `indent` (positional or by name); `sort_keys` and
/// `ensure_ascii` by name too.
pub(super) fn tojson(value: Value, indent: Option<Value>, kwargs: Kwargs) -> Result<Value, Error> {
    let bad =
        |e: serde_json::Error| Error::new(ErrorKind::InvalidOperation, format!("tojson: {e}"));
    let indent: Option<usize> = match indent {
        Some(v) if !v.is_none() => Some(usize::try_from(v)?),
        _ => kwargs.get::<Option<usize>>("indent")?,
    };
    let sort_keys = kwargs.get::<Option<bool>>("sort_keys")?.unwrap_or(false);
    let separators: Option<Vec<String>> = kwargs.get("separators")?;
    let (item_sep, key_sep) = match separators.as_deref() {
        None => (", ", ": "),
        Some([item, key]) => (item.as_str(), key.as_str()),
        Some(_) => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                "tojson: separators must be (item separator, key separator)",
            ));
        }
    };
    let _ensure_ascii: Option<bool> = kwargs.get("ensure_ascii")?;
    kwargs.assert_all_used()?;
    if value.kind() == minijinja::value::ValueKind::Iterable {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            "tojson: a generator (the result of map, select, ...) is not JSON serializable; add | list",
        ));
    }
    let mut json = if is_py_none(&value) {
        serde_json::Value::Null
    } else {
        serde_json::to_value(&value).map_err(bad)?
    };
    if sort_keys {
        json = sorted(json);
    }
    let s = match indent {
        Some(n) => {
            let mut buf = Vec::new();
            let indent_str = " ".repeat(n);
            let fmt = serde_json::ser::PrettyFormatter::with_indent(indent_str.as_bytes());
            let mut ser = serde_json::Serializer::with_formatter(&mut buf, fmt);
            json.serialize(&mut ser).map_err(bad)?;
            String::from_utf8(buf).expect("JSON is UTF-8")
        }
        None => python_json(&json, item_sep, key_sep),
    };
    Ok(Value::from_safe_string(s))
}

/// `json` with every object's keys sorted.
fn sorted(json: serde_json::Value) -> serde_json::Value {
    match json {
        serde_json::Value::Object(m) => {
            let mut entries: Vec<(String, serde_json::Value)> = m.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            serde_json::Value::Object(entries.into_iter().map(|(k, v)| (k, sorted(v))).collect())
        }
        serde_json::Value::Array(a) => {
            serde_json::Value::Array(a.into_iter().map(sorted).collect())
        }
        v => v,
    }
}

/// `json` as Python's `json.dumps` writes it without an indent, with these
/// separators (by default `", "` and `": "`).
fn python_json(json: &serde_json::Value, item_sep: &str, key_sep: &str) -> String {
    match json {
        serde_json::Value::Object(m) => {
            let items: Vec<String> = m
                .iter()
                .map(|(k, v)| {
                    let key = serde_json::Value::String(k.clone());
                    format!("{key}{key_sep}{}", python_json(v, item_sep, key_sep))
                })
                .collect();
            format!("{{{}}}", items.join(item_sep))
        }
        serde_json::Value::Array(a) => {
            let items: Vec<String> = a
                .iter()
                .map(|v| python_json(v, item_sep, key_sep))
                .collect();
            format!("[{}]", items.join(item_sep))
        }
        v => v.to_string(),
    }
}

/// Python's `datetime.now().strftime(fmt)`, as `transformers` gives templates
/// (Llama 3.1 writes "Today Date: 26 Jul 2024" with it): the local time, or
/// `fixed` (Unix seconds, UTC).
pub(super) fn strftime_now(fmt: &str, fixed: Option<i64>) -> Result<String, Error> {
    use std::fmt::Write;
    let mut out = String::new();
    let written = match fixed {
        Some(secs) => {
            let t = chrono::DateTime::from_timestamp(secs, 0).ok_or_else(|| {
                Error::new(
                    ErrorKind::InvalidOperation,
                    "strftime_now: time out of range",
                )
            })?;
            write!(out, "{}", t.format(fmt))
        }
        None => write!(out, "{}", chrono::Local::now().format(fmt)),
    };
    written.map_err(|_| {
        Error::new(
            ErrorKind::InvalidOperation,
            format!("strftime_now: {fmt:?} is not a strftime format"),
        )
    })?;
    Ok(out)
}

/// Python's `None` where minijinja's `none` would differ: not iterable.
#[derive(Debug)]
pub(super) struct PyNone;

impl Object for PyNone {
    fn repr(self: &Arc<Self>) -> minijinja::value::ObjectRepr {
        minijinja::value::ObjectRepr::Plain
    }

    fn enumerate(self: &Arc<Self>) -> minijinja::value::Enumerator {
        minijinja::value::Enumerator::NonEnumerable
    }

    fn is_true(self: &Arc<Self>) -> bool {
        false
    }

    fn render(self: &Arc<Self>, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("None")
    }
}

fn is_py_none(v: &Value) -> bool {
    v.is_none() || v.downcast_object_ref::<PyNone>().is_some()
}

/// The context's top-level `null`s as [`PyNone`].
pub(super) fn top_level(ctx: &serde_json::Value) -> Value {
    let serde_json::Value::Object(m) = ctx else {
        return Value::from(minijinja::value::Serde(ctx));
    };
    let pairs: Vec<(&str, Value)> = m
        .iter()
        .map(|(k, v)| {
            let v = match v {
                serde_json::Value::Null => Value::from_object(PyNone),
                v => Value::from(minijinja::value::Serde(v)),
            };
            (k.as_str(), v)
        })
        .collect();
    Value::from_pairs(pairs)
}

/// Installs jinja2's behaviour on `env` (see the module header).
pub(super) fn install(env: &mut Environment<'static>, fixed_time: Option<i64>) {
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.add_filter("tojson", tojson);
    env.add_function("raise_exception", |msg: String| -> Result<Value, Error> {
        Err(Error::new(
            ErrorKind::InvalidOperation,
            format!("template raised: {msg}"),
        ))
    });
    env.add_function(
        "strftime_now",
        move |fmt: String| -> Result<String, Error> { strftime_now(&fmt, fixed_time) },
    );
    env.add_test("none", |v: &Value| is_py_none(v));
    env.add_test("iterable", |v: &Value| {
        !is_py_none(v) && v.try_iter().is_ok()
    });
    env.set_formatter(python_formatter);
    // jinja2's select / reject / map filters start with `if value:`, so `None`
    // gives nothing where iterating it fails.
    use minijinja::filters;
    use minijinja::value::{Rest, ValueOrKwargs};
    type Args = Rest<ValueOrKwargs>;
    env.add_filter(
        "select",
        |s: &mut State, v: Value, t: Option<String>, a: Args| {
            filters::select(s, none_as_empty(v), t.map(Into::into), a).map(generator)
        },
    );
    env.add_filter(
        "reject",
        |s: &mut State, v: Value, t: Option<String>, a: Args| {
            filters::reject(s, none_as_empty(v), t.map(Into::into), a).map(generator)
        },
    );
    env.add_filter(
        "selectattr",
        |s: &mut State, v: Value, attr: String, t: Option<String>, a: Args| {
            filters::selectattr(s, none_as_empty(v), attr.into(), t.map(Into::into), a)
                .map(generator)
        },
    );
    env.add_filter(
        "rejectattr",
        |s: &mut State, v: Value, attr: String, t: Option<String>, a: Args| {
            filters::rejectattr(s, none_as_empty(v), attr.into(), t.map(Into::into), a)
                .map(generator)
        },
    );
    env.add_filter("map", |s: &mut State, v: Value, a: Args| {
        filters::map(s, none_as_empty(v), a).map(generator)
    });
}

/// A filter's result as the one-shot generator jinja2's filters return
/// (iterable once, and not JSON).
fn generator(items: Vec<Value>) -> Value {
    Value::make_one_shot_iterator(items.into_iter())
}

/// `v`, or an empty list for Python's `None`.
fn none_as_empty(v: Value) -> Value {
    if is_py_none(&v) {
        Value::from(Vec::<Value>::new())
    } else {
        v
    }
}

/// Prints values as Python's `str()` does where it differs from minijinja.
fn python_formatter(out: &mut Output, state: &mut State, value: &Value) -> Result<(), Error> {
    let text = match value.kind() {
        minijinja::value::ValueKind::None => "None",
        minijinja::value::ValueKind::Bool if value.is_true() => "True",
        minijinja::value::ValueKind::Bool => "False",
        _ => return minijinja::escape_formatter(out, state, value),
    };
    out.write_str(text).map_err(Error::from)
}

/// `source` with `transformers`' `{% generation %}` / `{% endgeneration %}` tags
/// (which mark the assistant's tokens and render their body) as an always-true
/// `if`, whitespace control and line numbers kept.
pub(super) fn without_generation_tags(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    while let Some(at) = rest.find("{%") {
        out.push_str(&rest[..at]);
        let tag = &rest[at..];
        let Some(end) = tag.find("%}") else {
            out.push_str(tag);
            return out;
        };
        let inner = &tag[2..end];
        let open = inner.strip_prefix(['-', '+']).unwrap_or(inner);
        let close = open.strip_suffix(['-', '+']).unwrap_or(open);
        let (lead, trail) = (&inner[..inner.len() - open.len()], &open[close.len()..]);
        let replacement = match close.trim() {
            "generation" => Some("if true"),
            "endgeneration" => Some("endif"),
            _ => None,
        };
        match replacement {
            Some(r) => out.push_str(&format!("{{%{lead} {r} {trail}%}}")),
            None => out.push_str(&tag[..end + 2]),
        }
        rest = &tag[end + 2..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generation_tags_render_their_body() {
        let src = "a{%- generation -%}\n b {% endgeneration %}c{% if x %}{% endif %}";
        assert_eq!(
            without_generation_tags(src),
            "a{%- if true -%}\n b {% endif %}c{% if x %}{% endif %}"
        );
    }

    #[test]
    fn python_none_is_not_iterable_and_prints_as_python() {
        let t = crate::chat::ChatTemplate::jinja(
            "{{ tools }} {{ tools is none }} {{ tools is iterable }} {{ [1] is iterable }} {{ true }}{% for t in tools %}{% endfor %}",
            "",
            "",
        )
        .unwrap();
        let ctx = serde_json::json!({"tools": null});
        let e = t.render_context(&ctx).unwrap_err().to_string();
        assert!(e.contains("line 1"), "{e}");
        let t = crate::chat::ChatTemplate::jinja(
            "{{ tools }} {{ tools is none }} {{ tools is iterable }} {{ [1] is iterable }} {{ true }} {{ tools | tojson }}",
            "",
            "",
        )
        .unwrap();
        assert_eq!(
            t.render_context(&ctx).unwrap(),
            "None True False True True null"
        );
    }

    #[test]
    fn tojson_takes_python_json_dumps_options() {
        let src = "{{ x | tojson }}|{{ x | tojson(indent=2) }}|{{ x | tojson(separators=(',', ':')) }}|{{ x | tojson(sort_keys=true) }}";
        let t = crate::chat::ChatTemplate::jinja(src, "", "").unwrap();
        let crate::chat::ChatTemplate::Jinja { env, .. } = &t else {
            panic!()
        };
        let out = env
            .get_template(crate::chat::TEMPLATE_NAME)
            .unwrap()
            .render(minijinja::context! { x => Value::from(minijinja::value::Serde(serde_json::json!({"b": [1, 2], "a": "é"}))) })
            .unwrap();
        assert_eq!(
            out,
            "{\"b\": [1, 2], \"a\": \"é\"}|{\n  \"b\": [\n    1,\n    2\n  ],\n  \"a\": \"é\"\n}|{\"b\":[1,2],\"a\":\"é\"}|{\"a\": \"é\", \"b\": [1, 2]}"
        );
    }
}
