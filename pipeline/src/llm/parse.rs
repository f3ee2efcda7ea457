//! Tolerant parsing of JSON answers: models wrap JSON in code fences, add prose around it,
//! leave trailing commas, use smart quotes, or stop mid-answer. This recovers what can be
//! recovered and says precisely what could not.

use serde::de::DeserializeOwned;

/// Parses the first JSON object or array in `answer` as `T`, repairing common damage.
pub fn parse_json<T: DeserializeOwned>(answer: &str) -> Result<T, String> {
    let Some(candidate) = json_candidate(answer) else {
        return Err("the answer contains no JSON object or array".into());
    };
    let first_error = match serde_json::from_str::<T>(candidate) {
        Ok(v) => return Ok(v),
        Err(e) if e.classify() == serde_json::error::Category::Data => {
            return Err(format!("the JSON does not have the requested shape: {e}"));
        }
        Err(e) => e,
    };
    let mut text = clean(candidate);
    // A truncated answer: close what is open; if that does not parse, drop the last partial
    // element and try again.
    for _ in 0..64 {
        let close = closers(&text);
        // A string cut off mid-way is damaged content: drop its element instead of closing it.
        if close.starts_with('"') {
            match last_separator(&text) {
                Some(cut) if cut > 0 => {
                    text.truncate(cut);
                    strip_trailing_comma(&mut text);
                    continue;
                }
                _ => break,
            }
        }
        let closed = format!("{text}{close}");
        // A shape error here means the closed partial element lacks fields: cut it too.
        if let Ok(v) = serde_json::from_str::<T>(&closed) {
            return Ok(v);
        }
        match last_separator(&text) {
            Some(cut) if cut > 0 => {
                text.truncate(cut);
                strip_trailing_comma(&mut text);
            }
            _ => break,
        }
    }
    Err(format!("invalid JSON: {first_error}"))
}

/// The text from the first `{` or `[` to its matching bracket (or to the end when the answer
/// was cut off).
fn json_candidate(answer: &str) -> Option<&str> {
    let start = answer.find(['{', '['])?;
    let s = &answer[start..];
    let mut depth = 0i32;
    for (i, c) in structure(s).0 {
        match c {
            '{' | '[' => depth += 1,
            '}' | ']' => {
                depth -= 1;
                if depth == 0 {
                    return Some(&s[..=i]);
                }
            }
            _ => {}
        }
    }
    Some(s.trim_end().trim_end_matches("```").trim_end())
}

/// The characters of JSON text that lie outside string literals (quotes excluded), with their
/// byte offsets, and whether the text ends inside a string.
fn structure(s: &str) -> (Vec<(usize, char)>, bool) {
    let mut out = Vec::new();
    let mut in_string = false;
    let mut escaped = false;
    for (i, c) in s.char_indices() {
        if in_string {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_string = false,
                _ => {}
            }
        } else if c == '"' {
            in_string = true;
        } else {
            out.push((i, c));
        }
    }
    (out, in_string)
}

/// Smart quotes outside strings become JSON quotes, `//` comments and trailing commas go.
fn clean(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let chars: Vec<char> = s.chars().collect();
    let mut in_string = false;
    let mut smart = false;
    let mut escaped = false;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if in_string {
            match c {
                _ if escaped => {
                    escaped = false;
                    out.push(c);
                }
                '\\' => {
                    escaped = true;
                    out.push(c);
                }
                '"' if !smart => {
                    in_string = false;
                    out.push(c);
                }
                '”' | '“' if smart => {
                    in_string = false;
                    out.push('"');
                }
                '"' => out.push_str("\\\""),
                _ => out.push(c),
            }
        } else {
            match c {
                '"' | '“' | '”' => {
                    out.push('"');
                    in_string = true;
                    smart = c != '"';
                }
                '/' if chars.get(i + 1) == Some(&'/') => {
                    while i < chars.len() && chars[i] != '\n' {
                        i += 1;
                    }
                    continue;
                }
                '}' | ']' => {
                    strip_trailing_comma(&mut out);
                    out.push(c);
                }
                _ => out.push(c),
            }
        }
        i += 1;
    }
    out
}

/// What closes the strings and brackets left open at the end of `s`.
fn closers(s: &str) -> String {
    let (structural, in_string) = structure(s);
    let mut open = Vec::new();
    for (_, c) in structural {
        match c {
            '{' => open.push('}'),
            '[' => open.push(']'),
            '}' | ']' => {
                open.pop();
            }
            _ => {}
        }
    }
    let mut out = String::new();
    if in_string {
        out.push('"');
    }
    out.extend(open.into_iter().rev());
    out
}

fn strip_trailing_comma(out: &mut String) {
    let trimmed = out.trim_end().len();
    out.truncate(trimmed);
    if out.ends_with(',') {
        out.pop();
    }
}

/// Byte offset of the last `,` outside strings, or just after the last opener: where the last
/// (partial) element starts.
fn last_separator(s: &str) -> Option<usize> {
    let mut last = None;
    for (i, c) in structure(s).0 {
        match c {
            ',' => last = Some(i),
            // After an opener, unless it is the last character: then the opener itself goes.
            '{' | '[' => last = Some(if i + 1 < s.len() { i + 1 } else { i }),
            _ => {}
        }
    }
    last.filter(|&l| l < s.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Clone, Deserialize, PartialEq)]
    struct Items {
        items: Vec<Item>,
    }
    #[derive(Debug, Clone, Deserialize, PartialEq)]
    struct Item {
        statement: String,
        entities: Vec<String>,
    }

    fn items(answer: &str) -> Result<Vec<(String, usize)>, String> {
        parse_json::<Items>(answer).map(|v| v.items.into_iter().map(|i| (i.statement, i.entities.len())).collect())
    }

    #[test]
    fn fences_prose_trailing_commas_and_comments() {
        let answer = "Here you go:\n```json\n{\"items\": [\n  {\"statement\": \"A {b}\", \"entities\": [\"A\",],}, // one\n]}\n```\nHope it helps.";
        assert_eq!(items(answer).unwrap(), [("A {b}".to_owned(), 1)]);
    }

    #[test]
    fn truncated_answers_keep_complete_elements() {
        let answer = "{\"items\": [{\"statement\": \"one\", \"entities\": []}, {\"statement\": \"tw";
        assert_eq!(items(answer).unwrap(), [("one".to_owned(), 0)]);
        let answer = "{\"items\": [{\"statement\": \"one\", \"entities\": [\"x\", \"y\"";
        // Closing what is open invents nothing: the element is kept as far as it goes.
        assert_eq!(items(answer).unwrap(), [("one".to_owned(), 2)]);
        let answer = "{\"items\": [{\"statement\": \"one\", \"entities\": [\"x\", \"y";
        // ... but a string cut off mid-way is dropped, not completed.
        assert_eq!(items(answer).unwrap(), [("one".to_owned(), 1)]);
        let answer = "{\"items\": [{\"statement\": \"one\", \"entities\": [\"x\"]}, {\"statement\": \"two\", \"enti";
        assert_eq!(items(answer).unwrap(), [("one".to_owned(), 1)]);
    }

    #[test]
    fn smart_quotes_and_failures_are_explained() {
        assert_eq!(items("{“items”: []}").unwrap(), []);
        assert!(items("I could not find any items.").unwrap_err().contains("no JSON"));
        assert!(items("{\"items\": [{\"statement\": 3, \"entities\": []}]}").unwrap_err().contains("shape"));
    }

    mod fuzz {
        use super::*;
        use proptest::prelude::*;

        fn item() -> impl Strategy<Value = Item> {
            (any::<String>(), prop::collection::vec("\\PC{0,12}", 0..4))
                .prop_map(|(statement, entities)| Item { statement, entities })
        }

        fn to_json(items: &[Item]) -> String {
            let items: Vec<serde_json::Value> =
                items.iter().map(|i| serde_json::json!({"statement": i.statement, "entities": i.entities})).collect();
            serde_json::json!({ "items": items }).to_string()
        }

        proptest! {
            #![proptest_config(crate::fuzz_config())]

            #[test]
            fn fuzz_any_answer_parses_or_says_why(answer in any::<String>()) {
                if let Err(why) = parse_json::<serde_json::Value>(&answer) {
                    prop_assert!(!why.is_empty());
                }
                let _ = parse_json::<Items>(&answer);
            }

            #[test]
            fn fuzz_wrapped_answers_give_back_their_items(
                items in prop::collection::vec(item(), 0..6),
                before in "[A-Za-z .:\n]{0,40}",
                after in "[A-Za-z .:\n]{0,40}",
                fenced in any::<bool>(),
                trailing_comma in any::<bool>(),
            ) {
                let mut json = to_json(&items);
                if trailing_comma {
                    // `…}, ]}`: the list's closing bracket is the last `]` of the answer.
                    let end = json.rfind(']').unwrap_or_default();
                    json.insert_str(end, ", ");
                }
                let answer = if fenced { format!("{before}\n```json\n{json}\n```\n{after}") } else { format!("{before}{json}{after}") };
                prop_assert_eq!(parse_json::<Items>(&answer).map(|v| v.items), Ok(items));
            }

            #[test]
            fn fuzz_a_cut_answer_keeps_the_items_before_the_cut(items in prop::collection::vec(item(), 1..6), cut in 0.0f64..1.0) {
                let json = to_json(&items);
                let mut at = (json.len() as f64 * cut) as usize;
                while !json.is_char_boundary(at) {
                    at -= 1;
                }
                if let Ok(parsed) = parse_json::<Items>(&json[..at]) {
                    // Every item but the last one recovered is whole; the last may be the one cut.
                    prop_assert!(parsed.items.len() <= items.len());
                    let whole = parsed.items.len().saturating_sub(1);
                    prop_assert_eq!(&parsed.items[..whole], &items[..whole]);
                }
            }
        }
    }
}
