//! Drawing the full-screen chat: the conversation (or the selected child's
//! transcript), the agent tree while children exist, the status line, the prompt
//! editor with command completion, and the approval prompt over everything.

use super::app::{App, Item};
use super::transcript::Entry;
use crate::chat::tree::{describe_within, Spend, State};
use crate::words::one_line;
use ratatui::layout::{Constraint, Layout, Position, Rect};
use ratatui::style::{Color, Modifier, Style, Stylize};
use ratatui::text::{Line, Span, Text};
use ratatui::widgets::{Block, Clear, Paragraph, Wrap};
use ratatui::Frame;

/// Lines of a tool call's arguments or output shown when expanded.
const TOOL_LINES: usize = 20;
/// Prompt lines shown at once.
const INPUT_LINES: usize = 6;
/// Width from which the tree stands beside the conversation, not under it.
const SIDE_BY_SIDE: u16 = 140;

pub fn draw(f: &mut Frame, app: &App) {
    let input_h = app.input.lines().len().min(INPUT_LINES) as u16 + 2;
    let [main, status, input] = Layout::vertical([
        Constraint::Min(3),
        Constraint::Length(1),
        Constraint::Length(input_h),
    ])
    .areas(f.area());
    let (pane, tree_area) = if app.chat.tree.children().is_empty() {
        (main, None)
    } else if main.width >= SIDE_BY_SIDE {
        let [a, b] = Layout::horizontal([Constraint::Percentage(58), Constraint::Percentage(42)])
            .areas(main);
        (a, Some(b))
    } else {
        let rows = app
            .chat
            .tree
            .grouped()
            .iter()
            .map(|(_, g)| g.len() + 1)
            .sum::<usize>();
        let h = (rows as u16 + 2).min(main.height / 2).max(3);
        let [a, b] = Layout::vertical([Constraint::Min(3), Constraint::Length(h)]).areas(main);
        (a, Some(b))
    };
    draw_pane(f, pane, app);
    if let Some(area) = tree_area {
        let (tree, selected) = tree_lines(app, area.width.saturating_sub(2) as usize);
        draw_tree(f, area, tree, selected, app.chat.tree.total());
    }
    f.render_widget(Paragraph::new(status_line(app)), status);
    draw_input(f, input, app);
    draw_completions(f, main, input, app);
    draw_approval(f, f.area(), app);
}

/// The conversation, or the selected child's transcript, scrolled to the bottom
/// unless the user scrolled back.
fn draw_pane(f: &mut Frame, area: Rect, app: &App) {
    let (title, lines) = match app.selected.as_deref() {
        Some(id) => child_lines(app, id),
        None => (" conversation ".to_string(), conversation_lines(app)),
    };
    let block = Block::bordered()
        .title(title)
        .border_style(Style::new().fg(Color::DarkGray));
    let inner = block.inner(area);
    let para = Paragraph::new(Text::from(lines)).wrap(Wrap { trim: false });
    let total = para.line_count(inner.width) as u16;
    let bottom = total.saturating_sub(inner.height);
    let top = bottom.saturating_sub(app.scroll);
    f.render_widget(para.block(block).scroll((top, 0)), area);
}

fn conversation_lines(app: &App) -> Vec<Line<'static>> {
    let mut out = Vec::new();
    if app.items.is_empty() {
        out.push(Line::from(
            "Type a prompt for the parent agent; /help lists commands and keys.".dark_gray(),
        ));
    }
    for item in &app.items {
        match item {
            Item::User(text) => {
                for (i, l) in text.lines().enumerate() {
                    let mark = if i == 0 { "› " } else { "  " };
                    out.push(Line::from(vec![
                        mark.cyan().bold(),
                        Span::raw(l.to_string()).bold(),
                    ]));
                }
            }
            Item::Run(id) => entries_lines(app, id, &mut out),
            Item::Info(lines) => out.extend(lines.iter().map(|l| Line::from(l.clone().gray()))),
            Item::Error(e) => out.push(Line::from(format!("✗ {e}").red())),
        }
        out.push(Line::default());
    }
    if app.turn.is_some() {
        out.push(Line::from("working…".dark_gray().italic()));
    }
    out
}

/// A child's header and transcript.
fn child_lines(app: &App, id: &str) -> (String, Vec<Line<'static>>) {
    let mut out = Vec::new();
    let title = match app.chat.tree.get(id) {
        Some(n) => {
            out.push(Line::from(format!("task: {}", n.task).bold()));
            out.push(Line::default());
            format!(
                " {} [{} · {}] — {} (Esc: back) ",
                n.name,
                n.role,
                n.model,
                n.state.as_str()
            )
        }
        None => format!(" {id} "),
    };
    entries_lines(app, id, &mut out);
    (title, out)
}

fn entries_lines(app: &App, id: &str, out: &mut Vec<Line<'static>>) {
    for e in app.transcripts.of(id) {
        match e {
            Entry::Text(t) => out.extend(t.lines().map(|l| Line::raw(l.to_string()))),
            Entry::End(what) => out.push(Line::from(format!("■ {what}").yellow())),
            Entry::Tool(c) => {
                let (mark, state) = match &c.result {
                    None => ("…".to_string(), "running".to_string()),
                    Some(r) if r.ok => ("✓".to_string(), format!("{} ms", r.duration_ms)),
                    Some(r) => ("✗".to_string(), first_line(&r.output)),
                };
                let arrow = if app.expanded { "▾" } else { "▸" };
                let args = one_line(&c.arguments, 60);
                out.push(Line::from(vec![
                    format!("{arrow} ").dark_gray(),
                    c.name.clone().magenta(),
                    format!(" {args} ").dark_gray(),
                    format!("{mark} {state}").dark_gray(),
                ]));
                if app.expanded {
                    capped(&c.arguments, "  │ ", out);
                    if let Some(r) = &c.result {
                        capped(&r.output, "  → ", out);
                    }
                }
            }
        }
    }
}

/// At most [`TOOL_LINES`] lines of `text`, each after `prefix`.
fn capped(text: &str, prefix: &str, out: &mut Vec<Line<'static>>) {
    let total = text.lines().count();
    for l in text.lines().take(TOOL_LINES) {
        out.push(Line::from(format!("{prefix}{l}").dark_gray()));
    }
    if total > TOOL_LINES {
        out.push(Line::from(
            format!("{prefix}… {} more lines", total - TOOL_LINES).dark_gray(),
        ));
    }
}

fn first_line(s: &str) -> String {
    one_line(s.lines().next().unwrap_or(""), 60)
}

/// The tree pane's lines: each group's heading, then its agents
/// `├─ name [role · model] task — state, elapsed, tokens, cost`; the selected one marked
/// (and its line's index).
fn tree_lines(app: &App, width: usize) -> (Vec<Line<'static>>, Option<usize>) {
    let mut out = Vec::new();
    let mut selected = None;
    for (group, nodes) in app.chat.tree.grouped() {
        let heading = format!("{group} ({})", nodes.len());
        out.push(Line::from(match group {
            "Needs input" => heading.yellow().bold(),
            "Working" => heading.cyan().bold(),
            _ => heading.bold(),
        }));
        let last = nodes.len().saturating_sub(1);
        for (i, (id, node, depth)) in nodes.into_iter().enumerate() {
            let branch = if i == last { "└─ " } else { "├─ " };
            let indent = "   ".repeat(depth.saturating_sub(1));
            let color = match node.state {
                State::WaitingApproval => Color::Yellow,
                State::Running | State::Queued => Color::Reset,
                State::Completed => Color::Green,
                _ => Color::Red,
            };
            let mut style = Style::new().fg(color);
            if app.selected.as_deref() == Some(id) {
                style = style.add_modifier(Modifier::REVERSED);
                selected = Some(out.len());
            }
            out.push(Line::from(vec![
                Span::raw(format!("{indent}{branch}")),
                Span::styled(
                    describe_within(node, width.saturating_sub(indent.len() + 3)),
                    style,
                ),
            ]));
        }
    }
    (out, selected)
}

fn draw_tree(
    f: &mut Frame,
    area: Rect,
    lines: Vec<Line<'static>>,
    selected: Option<usize>,
    total: Spend,
) {
    let block = Block::bordered()
        .title(format!(" agents · {} (Ctrl-N/P select) ", total.text()))
        .border_style(Style::new().fg(Color::DarkGray));
    let height = block.inner(area).height as usize;
    // Keep the selected agent in view.
    let top = selected.map_or(0, |i| (i + 1).saturating_sub(height)) as u16;
    f.render_widget(Paragraph::new(lines).block(block).scroll((top, 0)), area);
}

/// `provider · model │ tokens │ cost │ children │ what happens now`.
fn status_line(app: &App) -> Line<'static> {
    let (provider, model) = app.chat.main_model();
    let (input, output) = app.tokens();
    let cost = app
        .chat
        .usage
        .cost_usd()
        .map_or_else(|| "cost n/a".to_string(), |c| format!("${c:.4}"));
    let (running, queued) = app.chat.tree.counts();
    let now = if let Some(n) = &app.notice {
        n.clone().yellow()
    } else if !app.approvals.is_empty() {
        "approval needed".yellow().bold()
    } else if app.turn.is_some() {
        "working… Esc interrupts".cyan()
    } else {
        "ready · /help · Ctrl-C twice quits".dark_gray()
    };
    Line::from(vec![
        format!(" {provider} · {model} ").bold(),
        format!("│ {input} in / {output} out tokens │ {cost} │ ").into(),
        format!("{running} running, {queued} queued │ ").into(),
        now,
    ])
    .style(Style::new().bg(Color::Rgb(30, 30, 40)))
}

fn draw_input(f: &mut Frame, area: Rect, app: &App) {
    let block =
        Block::bordered().title(" prompt (Enter send · Alt-Enter new line · Tab complete) ");
    let inner = block.inner(area);
    let lines = app.input.lines();
    let (row, before) = app.input.cursor();
    let first = (row + 1).saturating_sub(inner.height as usize);
    let shown: Vec<Line> = lines.into_iter().skip(first).map(Line::raw).collect();
    // Long lines scroll sideways so the cursor stays visible.
    let x = Span::raw(before).width() as u16;
    let left = x.saturating_sub(inner.width.saturating_sub(1));
    f.render_widget(Paragraph::new(shown).block(block).scroll((0, left)), area);
    if app.approvals.is_empty() {
        f.set_cursor_position(Position::new(
            inner.x + x - left,
            inner.y + (row - first) as u16,
        ));
    }
}

/// The matching commands, above the prompt, while a `/name` is being typed.
fn draw_completions(f: &mut Frame, main: Rect, input: Rect, app: &App) {
    let names = app.input.completions();
    if names.is_empty() {
        return;
    }
    let help = crate::chat::slash::HELP;
    let lines: Vec<Line> = help
        .iter()
        .filter(|(c, _)| names.iter().any(|n| c.split_whitespace().next() == Some(n)))
        .map(|(c, what)| Line::from(vec![format!("{c:<28}").cyan(), Span::raw(*what)]))
        .collect();
    let h = (lines.len() as u16 + 2).min(main.height);
    let area = Rect::new(input.x, input.y.saturating_sub(h), input.width, h);
    f.render_widget(Clear, area);
    f.render_widget(
        Paragraph::new(lines).block(Block::bordered().title(" Tab completes ")),
        area,
    );
}

/// The first queued approval, centered: who asks, for what, and the keys.
fn draw_approval(f: &mut Frame, screen: Rect, app: &App) {
    let Some(asking) = app.approvals.front() else {
        return;
    };
    let r = &asking.request;
    let who = match app.chat.tree.get(&r.run_id) {
        Some(n) => n.name.clone(),
        None if r.lineage.is_empty() => "parent".to_string(),
        None => r.run_id.clone(),
    };
    let mut lines = vec![
        Line::from(vec![
            one_line(&who, 60).bold(),
            format!(
                " [{} · {}] wants to run ",
                one_line(&r.role, 40),
                one_line(&r.agent_type, 40)
            )
            .into(),
            one_line(&r.tool, 80).magenta().bold(),
        ]),
        Line::from(one_line(&r.arguments.to_string(), 200).dark_gray()),
    ];
    if let Some((rule, source)) = &r.rule {
        lines.push(Line::from(
            one_line(&format!("asked by the rule ask {rule} ({source})"), 200).dark_gray(),
        ));
    }
    lines.push(Line::default());
    match &app.deny_reason {
        Some(reason) => lines.push(Line::from(vec![
            "deny — why (the model reads it), Enter: ".into(),
            Span::raw(format!("{reason}▏")).bold(),
        ])),
        None => lines.push(Line::from(
            "a: allow once · s: allow for this session · d: deny (with a reason)".yellow(),
        )),
    }
    if app.approvals.len() > 1 {
        lines.push(Line::from(
            format!("{} more waiting", app.approvals.len() - 1).dark_gray(),
        ));
    }
    let w = screen.width.saturating_sub(4).min(100);
    let h = (lines.len() as u16 + 2).min(screen.height);
    let area = Rect::new(
        screen.x + (screen.width - w) / 2,
        screen.y + screen.height.saturating_sub(h) / 2,
        w,
        h,
    );
    f.render_widget(Clear, area);
    f.render_widget(
        Paragraph::new(lines)
            .wrap(Wrap { trim: false })
            .block(Block::bordered().title(" approval needed ").yellow()),
        area,
    );
}
