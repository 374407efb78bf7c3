//! `gpusched top` (docs/BEHAVIOUR.md "Seeing the whole box"): the box
//! view ([`crate::view::box_view`]) drawn full screen with ratatui and
//! refreshed every `--interval`; `q`, Esc or Ctrl-C quits. Over ssh and in
//! tmux it needs nothing but a terminal; at 80×24 the lines that do not
//! fit are cut, never wrapped into each other. Not on a terminal (or with
//! `--once`) it prints the view once.

use super::box_source::BoxSource;
use crate::cli::TopArgs;
use crate::view::box_view::{self, BoxDoc};
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// Runs `gpusched top`.
///
/// Errors: the GPUs, ledger or rules cannot be opened; the terminal
/// cannot be set up.
pub fn run(args: &TopArgs) -> anyhow::Result<i32> {
    let mut source = BoxSource::open(&args.place)?;
    if args.once || !std::io::stdout().is_terminal() {
        let doc = source.read()?;
        let mut out = std::io::stdout().lock();
        for line in box_view::render_text(&doc, crate::view::report::LINE_WIDTH) {
            writeln!(out, "{line}")?;
        }
        return Ok(0);
    }
    let mut terminal = ratatui::init();
    let result = live(
        &mut terminal,
        &mut source,
        Duration::from_secs_f64(args.interval),
    );
    ratatui::restore();
    result
}

/// Draws and refreshes until a quit key.
fn live(
    terminal: &mut ratatui::DefaultTerminal,
    source: &mut BoxSource,
    interval: Duration,
) -> anyhow::Result<i32> {
    loop {
        let doc = source.read();
        terminal.draw(|frame| {
            let area = frame.area();
            let text = match &doc {
                Ok(doc) => styled(doc, usize::from(area.width)),
                Err(e) => vec![Line::from(format!("cannot read the GPUs: {e:#}"))],
            };
            let mut lines = text;
            lines.truncate(usize::from(area.height).saturating_sub(1));
            while lines.len() + 1 < usize::from(area.height) {
                lines.push(Line::from(""));
            }
            lines.push(Line::from(Span::styled(
                "q quit",
                Style::default().add_modifier(Modifier::DIM),
            )));
            frame.render_widget(Paragraph::new(lines), area);
        })?;
        let until = Instant::now() + interval;
        while let Some(left) = until.checked_duration_since(Instant::now()) {
            if !event::poll(left)? {
                break;
            }
            if let Event::Key(key) = event::read()?
                && key.kind == KeyEventKind::Press
            {
                let ctrl_c =
                    key.code == KeyCode::Char('c') && key.modifiers.contains(KeyModifiers::CONTROL);
                if matches!(key.code, KeyCode::Char('q') | KeyCode::Esc) || ctrl_c {
                    return Ok(0);
                }
            }
        }
    }
}

/// The view's lines, coloured: the title bold, GPUs that are free green,
/// expected free times cyan, waiting reasons yellow.
fn styled(doc: &BoxDoc, width: usize) -> Vec<Line<'static>> {
    box_view::render_text(doc, width)
        .into_iter()
        .enumerate()
        .map(|(i, line)| {
            let style = if i == 0 {
                Style::default().add_modifier(Modifier::BOLD)
            } else if line.starts_with("GPU ") && line.contains("free now") {
                Style::default().fg(Color::Green)
            } else if line.starts_with("GPU ") {
                Style::default().fg(Color::Cyan)
            } else if line.starts_with("USER") || line.ends_with(')') && line.contains("'s queue") {
                Style::default().add_modifier(Modifier::BOLD)
            } else {
                Style::default()
            };
            Line::from(Span::styled(line, style))
        })
        .collect()
}
