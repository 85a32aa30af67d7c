//! Reasoning models against the real Qwen3, DeepSeek-R1 and gpt-oss templates in
//! llama.cpp's `models/templates`: which templates think in `<think>` tags
//! (and gpt-oss on its harmony analysis channel),
//! `chat_template_kwargs` reaching the template (`enable_thinking`), where the
//! answer starts after each prompt, and which templates have a
//! `reasoning_effort` knob.

use ferrox_testkit::llama_template;
use ferrox_text::chat::{ChatMessage, ChatTemplate, TemplateVars};
use ferrox_text::reasoning::{AnswerPhase, ThinkFormat, Thinking, split};
use serde_json::json;

fn template(name: &str) -> Option<ChatTemplate> {
    llama_template(name)
}

fn vars(v: serde_json::Value) -> TemplateVars {
    v.as_object().unwrap().clone()
}

fn start(t: &ChatTemplate, v: &TemplateVars) -> AnswerPhase {
    let msgs = [ChatMessage::new("user", "What is 2+2?")];
    let prompt = t.render_with_tools(&msgs, &[], v, true).unwrap();
    AnswerPhase::after_prompt(t.thinks().expect("a thinking template"), &prompt)
}

#[test]
fn thinking_templates_start_their_answers_where_their_prompts_leave_off() {
    let Some(qwen3) = template("Qwen-Qwen3-0.6B.jinja") else {
        return;
    };
    assert!(qwen3.thinks() == Some(ThinkFormat::ThinkTags) && qwen3.reads("enable_thinking"));
    assert_eq!(start(&qwen3, &TemplateVars::new()), AnswerPhase::Start);
    let off = vars(json!({"enable_thinking": false}));
    assert_eq!(start(&qwen3, &off), AnswerPhase::Answering);
    // Variables never replace the conversation.
    let sneaky = vars(json!({"messages": [], "add_generation_prompt": false}));
    let msgs = [ChatMessage::new("user", "What is 2+2?")];
    let prompt = qwen3.render_with_tools(&msgs, &[], &sneaky, true).unwrap();
    assert!(
        prompt.contains("What is 2+2?") && prompt.trim_end().ends_with("assistant"),
        "{prompt}"
    );

    let Some(r1) = template("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja") else {
        return;
    };
    assert_eq!(r1.thinks(), Some(ThinkFormat::ThinkTags));
    let on = vars(json!({"enable_thinking": true}));
    assert_eq!(start(&r1, &on), AnswerPhase::Thinking);
    assert_eq!(start(&r1, &TemplateVars::new()), AnswerPhase::Answering);
    // An R1 answer after its prompt opened the thinking.
    let (r, c) = split(
        "Two and two make four.\n</think>\n\nThe answer is 4.",
        Thinking {
            format: ThinkFormat::ThinkTags,
            start: AnswerPhase::Thinking,
        },
    );
    assert_eq!(
        (r.as_deref(), c.as_str()),
        (Some("Two and two make four.\n"), "The answer is 4.")
    );
}

#[test]
fn reasoning_effort_is_a_knob_only_where_a_template_reads_it() {
    let (Some(oss), Some(qwen3)) = (
        template("openai-gpt-oss-120b.jinja"),
        template("Qwen-Qwen3-0.6B.jinja"),
    ) else {
        return;
    };
    assert!(oss.reads("reasoning_effort") && !qwen3.reads("reasoning_effort"));
    // gpt-oss thinks on its analysis channel; its prompt leaves the channel open.
    assert_eq!(oss.thinks(), Some(ThinkFormat::Harmony));
    assert_eq!(start(&oss, &TemplateVars::new()), AnswerPhase::Start);
    let msgs = [ChatMessage::new("user", "Hi")];
    let high = oss
        .render_with_tools(&msgs, &[], &vars(json!({"reasoning_effort": "high"})), true)
        .unwrap();
    let low = oss
        .render_with_tools(&msgs, &[], &vars(json!({"reasoning_effort": "low"})), true)
        .unwrap();
    assert!(
        high.contains("Reasoning: high") && low.contains("Reasoning: low"),
        "{high}"
    );
}
