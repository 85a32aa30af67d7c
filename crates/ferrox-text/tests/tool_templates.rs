//! Tool calling against the real chat templates in llama.cpp's `models/templates`
//! (unpacked by `scripts/fetch-llama-refs`): each template that writes calls in a
//! format ferrox parses is recognised as that format, renders the offered tools
//! and a history of calls and results, and the calls it writes into an assistant
//! turn parse back into the same calls. Templates that render tools in other
//! formats fall back to the built-in one and still render.

use ferrox_testkit::llama_template;
use ferrox_text::chat::{ChatMessage, ChatTemplate, TemplateVars};
use ferrox_text::tools::{Tool, ToolCall, ToolFormat};
use serde_json::json;

fn template(name: &str) -> Option<ChatTemplate> {
    llama_template(name)
}

fn weather() -> Tool {
    Tool {
        name: "get_weather".into(),
        description: Some("Current weather of a city".into()),
        parameters: json!({"type": "object", "properties": {"city": {"type": "string", "description": "The city"}}, "required": ["city"]}),
    }
}

fn call(id: &str) -> ToolCall {
    ToolCall {
        id: id.into(),
        name: "get_weather".into(),
        arguments: json!({"city": "Paris"}),
    }
}

#[test]
fn templates_with_tools_round_trip_their_calls() {
    let cases = [
        (
            "Qwen-Qwen2.5-7B-Instruct.jinja",
            ToolFormat::Hermes,
            "call_1",
        ),
        (
            "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja",
            ToolFormat::Hermes,
            "call_1",
        ),
        (
            "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja",
            ToolFormat::Hermes,
            "call_1",
        ),
        (
            "meta-llama-Llama-3.1-8B-Instruct.jinja",
            ToolFormat::Llama3,
            "call_1",
        ),
        (
            "meta-llama-Llama-3.2-3B-Instruct.jinja",
            ToolFormat::Llama3,
            "call_1",
        ),
        (
            "meta-llama-Llama-3.3-70B-Instruct.jinja",
            ToolFormat::Llama3,
            "call_1",
        ),
        (
            "mistralai-Mistral-Nemo-Instruct-2407.jinja",
            ToolFormat::Mistral,
            "abcDEF123",
        ),
        ("openai-gpt-oss-120b.jinja", ToolFormat::Harmony, "call_1"),
    ];
    for (name, format, id) in cases {
        let Some(t) = template(name) else { return };
        assert_eq!(t.tool_format(), format, "{name}");
        let user = ChatMessage::new("user", "Weather in Paris?");
        let tools = [weather()];
        // The offered tools are in the prompt.
        let prompt = t
            .render_with_tools(
                std::slice::from_ref(&user),
                &tools,
                &TemplateVars::new(),
                true,
            )
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(
            prompt.contains("get_weather") && prompt.contains("Current weather of a city"),
            "{name}: {prompt}"
        );
        // An assistant turn with a call, rendered, parses back into the call.
        let mut assistant = ChatMessage::new("assistant", "");
        assistant.tool_calls = vec![call(id)];
        let full = t
            .render_with_tools(
                &[user.clone(), assistant.clone()],
                &tools,
                &TemplateVars::new(),
                false,
            )
            .unwrap();
        let turn = full.strip_prefix(&prompt).unwrap_or_else(|| {
            panic!("{name}: the call's turn does not extend the prompt:\n{prompt}\n---\n{full}")
        });
        let turn = ["<|im_end|>", "<|eot_id|>", "</s>", "<|call|>"]
            .iter()
            .fold(turn.trim_end().to_string(), |t, end| {
                t.trim_end_matches(end).to_string()
            });
        let (content, calls) = format.parse(&turn, &mut || id.to_string());
        assert_eq!(calls, vec![call(id)], "{name}: {turn:?}");
        assert_eq!(content, "", "{name}");
        // A history with the result renders (the template's own checks pass).
        let mut result = ChatMessage::new("tool", "18 C and sunny");
        result.tool_call_id = Some(id.into());
        let history = t
            .render_with_tools(
                &[user, assistant, result],
                &tools,
                &TemplateVars::new(),
                true,
            )
            .unwrap();
        assert!(history.contains("18 C and sunny"), "{name}");
    }
}

#[test]
fn templates_without_a_known_format_get_the_builtin_one() {
    for name in [
        "microsoft-Phi-3.5-mini-instruct.jinja",
        "google-gemma-2-2b-it.jinja",
        "CohereForAI-c4ai-command-r-plus-tool_use.jinja",
    ] {
        let Some(t) = template(name) else { return };
        assert_eq!(t.tool_format(), ToolFormat::Hermes, "{name}");
        let mut assistant = ChatMessage::new("assistant", "");
        assistant.tool_calls = vec![call("call_1")];
        let mut result = ChatMessage::new("tool", "18 C and sunny");
        result.tool_call_id = Some("call_1".into());
        let msgs = [
            ChatMessage::new("user", "Weather in Paris?"),
            assistant,
            result,
        ];
        let text = t
            .render_with_tools(&msgs, &[weather()], &TemplateVars::new(), true)
            .unwrap();
        for part in [
            "<tools>",
            "get_weather",
            "<tool_call>",
            "<tool_response>\n18 C and sunny",
        ] {
            assert!(text.contains(part), "{name}: {part} missing from\n{text}");
        }
    }
}
