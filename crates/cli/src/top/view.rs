//! Drawing one frame of `hermes top`: a pure function of the model, the view's state and the
//! time (and the transcript lines the loop read for an open log pane). Snapshot-tested on
//! ratatui's `TestBackend`.

use hermes_ledger::Timestamp;
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span, Text};
use ratatui::widgets::{Block, Cell, Paragraph, Row as TableRow, Table, TableState, Wrap};

use super::ui::{Pane, Prompt, Ui};
use crate::services::overview::{self as model, DeliveryState, LeaseHealth, Model, Quiet, Row};

/// The smallest terminal the view draws in.
pub const MIN_WIDTH: u16 = 60;
pub const MIN_HEIGHT: u16 = 12;

/// The tail of a transcript shown in the log pane.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogTail {
    /// Where it comes from (a path, or the machine that has it).
    pub title: String,
    pub lines: Vec<String>,
}

/// Everything a frame is drawn from.
#[derive(Debug)]
pub struct Screen<'a> {
    pub model: &'a Model,
    pub ui: &'a Ui,
    pub now: Timestamp,
    /// Which ledger this is (the redb file or `host:port/db`).
    pub ledger: &'a str,
    pub log: Option<&'a LogTail>,
}

/// Draws the frame.
pub fn draw(frame: &mut Frame<'_>, screen: &Screen<'_>) {
    let area = frame.area();
    if area.width < MIN_WIDTH || area.height < MIN_HEIGHT {
        let text = format!(
            "terminal too small: {}x{}; hermes top needs at least {MIN_WIDTH}x{MIN_HEIGHT} (q quits)",
            area.width, area.height
        );
        frame.render_widget(Paragraph::new(text).wrap(Wrap { trim: true }), area);
        return;
    }
    let header = header_lines(screen);
    let header_height = u16::try_from(header.len())
        .unwrap_or(u16::MAX)
        .min(area.height / 3);
    let pane_height = match screen.ui.pane {
        Pane::None => 0,
        _ => (area.height - header_height) / 2,
    };
    let [top, table, pane, footer] = Layout::vertical([
        Constraint::Length(header_height),
        Constraint::Min(3),
        Constraint::Length(pane_height),
        Constraint::Length(1),
    ])
    .areas(area);
    frame.render_widget(Paragraph::new(Text::from(header)), top);
    draw_table(frame, table, screen);
    if pane_height > 0 {
        draw_pane(frame, pane, screen);
    }
    frame.render_widget(Paragraph::new(footer_line(screen)), footer);
}

fn header_lines(screen: &Screen<'_>) -> Vec<Line<'static>> {
    let m = screen.model;
    let mut lines = vec![Line::from(vec![
        Span::styled("hermes top", Style::new().add_modifier(Modifier::BOLD)),
        Span::raw(format!(
            "  {}  {} UTC  {} running · {} queued · {} finished{}",
            screen.ledger,
            clock(screen.now),
            m.running,
            m.queued,
            m.finished,
            if screen.ui.filter.is_empty() {
                String::new()
            } else {
                format!("  filter: {}", screen.ui.filter)
            }
        )),
    ])];
    for machine in &m.machines {
        let hosts: Vec<String> = machine
            .hosts
            .iter()
            .map(|(kind, n)| format!("{n} {kind}"))
            .collect();
        lines.push(Line::from(vec![
            Span::styled(
                format!("machine {:<16}", cut(&machine.name, 16)),
                Style::new().fg(Color::Cyan),
            ),
            Span::raw(format!(
                " slots {}/{}  queued {}  hosts {}  lease ",
                machine.used,
                machine.capacity,
                machine.queued,
                if hosts.is_empty() {
                    "none".to_owned()
                } else {
                    hosts.join(", ")
                }
            )),
            lease_span(&machine.lease),
        ]));
    }
    for pool in &m.pools {
        lines.push(Line::from(vec![
            Span::styled(
                format!("pool    {:<16}", cut(&pool.name, 16)),
                Style::new().fg(Color::Magenta),
            ),
            Span::raw(format!(
                " slots {}/{}  queued {}  workers {}  lease ",
                pool.used, pool.capacity, pool.queued, pool.workers
            )),
            lease_span(&pool.lease),
        ]));
    }
    lines
}

fn lease_span(lease: &LeaseHealth) -> Span<'static> {
    match lease {
        LeaseHealth::Ok { left_ms } => Span::styled(
            format!("ok ({}s left)", left_ms / 1000),
            Style::new().fg(Color::Green),
        ),
        LeaseHealth::Late { since_ms } => Span::styled(
            format!("late (renewed {}s ago)", since_ms / 1000),
            Style::new().fg(Color::Red),
        ),
        LeaseHealth::None => Span::styled("no live host", Style::new().fg(Color::DarkGray)),
    }
}

/// Which columns fit: all of them from 140 columns; without session and tool below that;
/// below 120 without goal, machine and calls too (the header names the machines).
#[derive(Clone, Copy)]
struct Columns {
    session: bool,
    goal: bool,
    tool: bool,
    machine: bool,
}

impl Columns {
    fn for_width(width: u16) -> Columns {
        Columns {
            session: width >= 140,
            tool: width >= 140,
            goal: width >= 120,
            machine: width >= 120,
        }
    }
}

fn draw_table(frame: &mut Frame<'_>, area: Rect, screen: &Screen<'_>) {
    let cols = Columns::for_width(area.width);
    let rows = screen.ui.visible(screen.model);
    let mut head = vec!["ID"];
    let mut widths = vec![Constraint::Length(18)];
    if cols.session {
        head.push("SESSION");
        widths.push(Constraint::Length(14));
    }
    if cols.goal {
        head.push("GOAL");
        widths.push(Constraint::Fill(1));
    }
    head.push("STATUS");
    widths.push(Constraint::Length(11));
    if cols.machine {
        head.push("MACHINE");
        widths.push(Constraint::Length(12));
    }
    head.push("ELAPSED");
    widths.push(Constraint::Length(7));
    if cols.machine {
        head.push("CALLS");
        widths.push(Constraint::Length(5));
    }
    if cols.tool {
        head.push("TOOL");
        widths.push(Constraint::Length(10));
    }
    head.extend(["QUIET", "DELIVERY"]);
    let delivery = if cols.session {
        Constraint::Min(26)
    } else {
        Constraint::Fill(1)
    };
    widths.extend([Constraint::Length(22), delivery]);
    let table_rows: Vec<TableRow<'static>> = rows.iter().map(|r| table_row(r, cols)).collect();
    let empty = rows.is_empty();
    let table = Table::new(table_rows, widths)
        .header(TableRow::new(head).style(Style::new().add_modifier(Modifier::BOLD)))
        .row_highlight_style(Style::new().add_modifier(Modifier::REVERSED))
        .highlight_symbol("› ")
        .highlight_spacing(ratatui::widgets::HighlightSpacing::Always)
        .column_spacing(1);
    let mut state = TableState::default().with_selected(screen.ui.selected_row(&rows));
    frame.render_stateful_widget(table, area, &mut state);
    if empty && area.height > 2 {
        let text = if screen.model.rows.is_empty() {
            "nothing running, queued or finished yet"
        } else {
            "no unit matches (f changes the filter, t shows finished units)"
        };
        let line = Rect {
            y: area.y + 1,
            height: 1,
            ..area
        };
        frame.render_widget(
            Paragraph::new(text).style(Style::new().fg(Color::DarkGray)),
            line,
        );
    }
}

fn table_row(r: &Row, cols: Columns) -> TableRow<'static> {
    let mut cells: Vec<Cell<'static>> = vec![Cell::from(r.id.to_string())];
    if cols.session {
        cells.push(Cell::from(cut(&r.session, 14)));
    }
    if cols.goal {
        let goal = if r.tasks > 1 {
            format!("{} ({} tasks)", r.goal, r.tasks)
        } else {
            r.goal.clone()
        };
        cells.push(Cell::from(hermes_formatter::one_line(&goal, 120)));
    }
    let machine = match (&r.pool, r.machine.is_empty()) {
        (Some(pool), true) => format!("pool {pool}"),
        _ => r.machine.clone(),
    };
    cells.push(Cell::from(r.status.clone()).style(status_style(&r.status)));
    if cols.machine {
        cells.push(Cell::from(cut(&machine, 12)));
    }
    cells.push(Cell::from(r.elapsed_ms.map(duration).unwrap_or_default()));
    if cols.machine {
        cells.push(Cell::from(r.api_calls.to_string()));
    }
    if cols.tool {
        cells.push(Cell::from(cut(r.tool.as_deref().unwrap_or(""), 10)));
    }
    cells.push(Cell::from(r.quiet.map(quiet_line).unwrap_or_default()));
    cells.push(Cell::from(model::delivery_words(
        &r.delivery,
        (r.delivery != DeliveryState::Nothing).then_some(r.attempts),
    )));
    let style = if r.finished {
        Style::new().fg(Color::DarkGray)
    } else {
        Style::new()
    };
    TableRow::new(cells).style(style)
}

fn status_style(status: &str) -> Style {
    match status {
        "running" => Style::new().fg(Color::Green),
        "queued" => Style::new().fg(Color::Yellow),
        "stalling" | "stalled" | "timeout" | "failed" | "unknown" => Style::new().fg(Color::Red),
        _ => Style::new(),
    }
}

/// The quiet-time bar: ten cells filling toward the threshold, and the seconds left; in the
/// grace period, the seconds until SIGKILL.
pub fn quiet_line(q: Quiet) -> Line<'static> {
    const CELLS: u64 = 10;
    match q {
        Quiet::Counting {
            quiet_ms,
            threshold_ms,
            in_tool,
        } => {
            let filled = (quiet_ms.saturating_mul(CELLS) / threshold_ms.max(1)).min(CELLS);
            let used = quiet_ms.saturating_mul(100) / threshold_ms.max(1);
            let color = match used {
                0..50 => Color::Green,
                50..80 => Color::Yellow,
                _ => Color::Red,
            };
            let left = threshold_ms.saturating_sub(quiet_ms).div_ceil(1000);
            Line::from(vec![
                Span::styled(bar(filled, CELLS), Style::new().fg(color)),
                Span::raw(format!(
                    " {left}s {}",
                    if in_tool { "tool" } else { "idle" }
                )),
            ])
        }
        Quiet::Grace { left_ms, grace_ms } => {
            let filled = (grace_ms.saturating_sub(left_ms).saturating_mul(CELLS) / grace_ms.max(1))
                .min(CELLS);
            Line::from(vec![
                Span::styled(bar(filled, CELLS), Style::new().fg(Color::Magenta)),
                Span::styled(
                    format!(" grace {}s", left_ms.div_ceil(1000)),
                    Style::new().fg(Color::Red),
                ),
            ])
        }
    }
}

fn bar(filled: u64, cells: u64) -> String {
    let filled = usize::try_from(filled).unwrap_or(0);
    let cells = usize::try_from(cells).unwrap_or(0);
    format!("{}{}", "█".repeat(filled), "░".repeat(cells - filled))
}

fn draw_pane(frame: &mut Frame<'_>, area: Rect, screen: &Screen<'_>) {
    let (title, lines): (String, Vec<Line<'static>>) = match &screen.ui.pane {
        Pane::None => return,
        Pane::Status(id) => match screen.model.rows.iter().find(|r| &r.id == id) {
            Some(row) => (format!(" status {id} (Enter closes) "), status_lines(row)),
            None => (
                format!(" status {id} "),
                vec![Line::from("no longer in view (purged, or filtered out)")],
            ),
        },
        Pane::Log(id) => {
            let log = screen.log.cloned().unwrap_or_default();
            let height = usize::from(area.height.saturating_sub(2));
            let skip = log.lines.len().saturating_sub(height);
            (
                format!(" log {id}: {} (l closes) ", log.title),
                log.lines.into_iter().skip(skip).map(Line::from).collect(),
            )
        }
    };
    frame.render_widget(
        Paragraph::new(Text::from(lines)).block(Block::bordered().title(title)),
        area,
    );
}

fn status_lines(row: &Row) -> Vec<Line<'static>> {
    let mut lines = vec![Line::from(format!(
        "{}  session {}  {}  {}{}",
        row.status,
        row.session,
        row.pool.as_ref().map_or_else(
            || format!("machine {}", row.machine),
            |p| format!("pool {p}")
        ),
        hermes_formatter::one_line(&row.goal, 80),
        row.elapsed_ms
            .map(|e| format!("  ({})", duration(e)))
            .unwrap_or_default(),
    ))];
    for c in &row.children {
        let mut spans = vec![Span::raw(format!(
            "task {}/{} {:<9} {} calls {}{}  ",
            c.index + 1,
            row.tasks,
            c.status,
            c.pid
                .map_or_else(|| "pid -".to_owned(), |p| format!("pid {p}")),
            c.api_calls,
            c.tool
                .as_ref()
                .map(|t| format!(" tool {t}"))
                .unwrap_or_default(),
        ))];
        if let Some(q) = c.quiet {
            spans.extend(quiet_line(q).spans);
            spans.push(Span::raw("  "));
        }
        spans.push(Span::raw(format!(
            "{}  {}",
            c.delivery,
            hermes_formatter::one_line(&c.goal, 60)
        )));
        lines.push(Line::from(spans));
        if let Some(branch) = &c.branch {
            lines.push(Line::from(Span::styled(
                format!("    branch {}", hermes_formatter::one_line(branch, 100)),
                Style::new().fg(Color::Cyan),
            )));
        }
        if let Some(sandbox) = &c.sandbox {
            lines.push(Line::from(Span::styled(
                format!("    sandbox {sandbox}"),
                Style::new().fg(Color::Yellow),
            )));
        }
        if let Some(t) = &c.transcript {
            lines.push(Line::from(Span::styled(
                format!("    {t}"),
                Style::new().fg(Color::DarkGray),
            )));
        }
    }
    lines
}

fn footer_line(screen: &Screen<'_>) -> Line<'static> {
    match &screen.ui.prompt {
        Prompt::Filter(text) => Line::from(format!(
            "filter (session, pool or machine; Enter applies, Esc cancels): {text}▏"
        )),
        Prompt::ConfirmStop(id) => Line::from(Span::styled(
            format!("stop {id}? y stops it, any other key keeps it"),
            Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD),
        )),
        Prompt::None => {
            let keys = "↑↓ select  Enter status  l log  s stop  f filter  t finished  q quit";
            match &screen.ui.note {
                Some(note) => Line::from(vec![
                    Span::styled(format!("{note}  "), Style::new().fg(Color::Yellow)),
                    Span::styled(keys, Style::new().fg(Color::DarkGray)),
                ]),
                None => Line::from(Span::styled(keys, Style::new().fg(Color::DarkGray))),
            }
        }
    }
}

/// `HH:MM:SS` of a timestamp, in UTC.
fn clock(t: Timestamp) -> String {
    let secs = t.as_millis() / 1000 % 86_400;
    format!("{:02}:{:02}:{:02}", secs / 3600, secs / 60 % 60, secs % 60)
}

/// A duration as `4s`, `12m03s` or `1h02m`.
pub fn duration(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, s / 60 % 60),
    }
}

fn cut(text: &str, max: usize) -> String {
    hermes_formatter::one_line(text, max)
}
