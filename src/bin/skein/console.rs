//! The operator console of `skein serve`: commands read from standard input, one per line, and
//! the frame loop that keeps the resources running while the operator types.
//!
//! A reader thread ([`read_lines`]) turns standard input into [`Input`]s on a channel, so a
//! read never blocks a frame: [`serve`] runs frames at a fixed interval while anything is live
//! and takes a command between two frames. With nothing live it sleeps on the channel alone.
//! End of input, `quit` and a signal (a message on the signal channel, sent by `signals.rs`)
//! end the loop, which then shuts the resources down. The signal has a channel of its own, so
//! lines queued ahead of it never delay it.
//!
//! The console speaks to the resources through the small [`Resources`] trait, so its parsing,
//! replies and loop are tested here with a fake; `serve.rs` implements it for the library's
//! `ResourceHost`. This file owns the command language and the console's texts, never a
//! resource's lifecycle.

use std::fmt::Display;
use std::io::{BufRead, Read, Write};
use std::time::{Duration, Instant};

use crossbeam_channel::{never, select, Receiver, Sender};

/// The longest command line taken, in bytes: a resource name is a folder's name, so a real
/// command is far shorter; a longer line is refused whole, never buffered past this.
pub(crate) const MAX_LINE: usize = 4096;

/// What the console prints for `help`.
pub(crate) const HELP: &str = "\
commands:
  list           one line per resource: NAME STATE (generation or never started, dependencies, exports), then its last error
  start NAME     start NAME; its dependencies must be running
  stop NAME      stop NAME; resources that depend on it keep running, and their calls into it fail
  reload NAME    stop NAME and start it again from disk, as a new generation
  help           this list
  quit           stop every resource, dependents first, and exit (so do end of input and Ctrl-C)";

/// One resource as `list` shows it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Row {
    pub name: String,
    /// `running`, `stopped`, `failed`, ... in the library's words.
    pub state: String,
    pub generation: u64,
    pub dependencies: Vec<String>,
    pub exports: Vec<String>,
    pub last_error: Option<String>,
}

/// What the console needs of the resources it manages: the library's `ResourceHost` in the
/// runner, a fake in the tests.
pub(crate) trait Resources {
    /// A refused command's error, printed as it displays.
    type Error: Display;

    /// Starts the resource `name`; answers what the operator should be told besides.
    fn start(&mut self, name: &str) -> Result<Vec<String>, Self::Error>;

    /// Stops the resource `name`; answers its warnings (resources still depending on it).
    fn stop(&mut self, name: &str) -> Result<Vec<String>, Self::Error>;

    /// Stops `name` and starts it again from disk as a new generation.
    fn reload(&mut self, name: &str) -> Result<Vec<String>, Self::Error>;

    /// Every resource loaded, in the order the host lists them.
    fn list(&self) -> Vec<Row>;

    /// Whether anything runs that frames must keep moving.
    fn is_live(&self) -> bool;

    /// Runs the frames `dt` covers; answers the failures no script handled, to say on stderr.
    fn advance(&mut self, dt: Duration) -> Vec<String>;

    /// Stops every resource, each after those that depend on it; answers what went wrong.
    fn shutdown(&mut self) -> Vec<String>;
}

/// What the reader thread hands the frame loop.
#[derive(Debug, PartialEq)]
pub(crate) enum Input {
    /// A command line, without its line end (bytes that are not UTF-8 replaced).
    Line(String),
    /// A line longer than [`MAX_LINE`] bytes, dropped unread past the bound.
    TooLong,
    /// Standard input ended (or could not be read).
    End,
}

/// How the console loop ended.
#[derive(Debug, PartialEq)]
pub(crate) enum Ended {
    Quit,
    EndOfInput,
    Signal,
}

/// Reads `input` line by line into `to` until it ends or nobody listens; each line is taken
/// within [`MAX_LINE`] bytes. Blocks: run it on a thread of its own.
pub(crate) fn read_lines(mut input: impl BufRead, to: &Sender<Input>) {
    loop {
        let mut line = Vec::new();
        let bound = u64::try_from(MAX_LINE).unwrap_or(u64::MAX) + 1;
        let read = (&mut input).take(bound).read_until(b'\n', &mut line);
        let next = match read {
            Ok(0) | Err(_) => Input::End,
            Ok(_) if line.last() == Some(&b'\n') => {
                line.pop();
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                Input::Line(String::from_utf8_lossy(&line).into_owned())
            }
            // The bound cut the line: drop the rest of it. A last line with no line end is
            // shorter than the bound, and is a line.
            Ok(n) if n > MAX_LINE => match skip_line(&mut input) {
                Ok(()) => Input::TooLong,
                Err(()) => Input::End,
            },
            Ok(_) => Input::Line(String::from_utf8_lossy(&line).into_owned()),
        };
        let end = next == Input::End;
        if to.send(next).is_err() || end {
            return;
        }
    }
}

/// Consumes `input` up to and including the next line end, holding nothing of it.
fn skip_line(input: &mut impl BufRead) -> Result<(), ()> {
    loop {
        let buf = input.fill_buf().map_err(|_| ())?;
        if buf.is_empty() {
            return Ok(());
        }
        match buf.iter().position(|&b| b == b'\n') {
            Some(at) => {
                input.consume(at + 1);
                return Ok(());
            }
            None => {
                let n = buf.len();
                input.consume(n);
            }
        }
    }
}

/// A parsed command line.
#[derive(Debug, PartialEq)]
enum Command<'a> {
    List,
    Start(&'a str),
    Stop(&'a str),
    Reload(&'a str),
    Help,
    Quit,
}

/// Parses one line; `Ok(None)` for a blank one.
fn parse<'a>(line: &'a str) -> Result<Option<Command<'a>>, String> {
    let mut words = line.split_whitespace();
    let Some(verb) = words.next() else {
        return Ok(None);
    };
    let args: Vec<&'a str> = words.collect();
    let named = |make: fn(&'a str) -> Command<'a>| match args.as_slice() {
        [name] => Ok(make(name)),
        [] => Err(format!("{verb} needs a resource name: {verb} NAME")),
        more => Err(format!(
            "{verb} takes one resource name, not {}: {verb} NAME",
            more.len()
        )),
    };
    let bare = |command: Command<'static>| match args.len() {
        0 => Ok(command),
        n => Err(format!(
            "{verb} takes no argument, got {n}: {}",
            args.join(" ")
        )),
    };
    let command = match verb {
        "list" => bare(Command::List),
        "help" => bare(Command::Help),
        "quit" => bare(Command::Quit),
        "start" => named(Command::Start),
        "stop" => named(Command::Stop),
        "reload" => named(Command::Reload),
        _ => Err(format!(
            "unknown command '{verb}' (help lists the commands)"
        )),
    };
    command.map(Some)
}

/// Where the console's replies go: stdout for answers, stderr for errors and warnings. Each
/// line is one write, so it never interleaves with a resource's `print`.
pub(crate) struct Say<O, E> {
    pub out: O,
    pub err: E,
}

impl<O: Write, E: Write> Say<O, E> {
    pub(crate) fn out(&mut self, text: &str) {
        let _ = self.out.write_all(format!("{text}\n").as_bytes());
        let _ = self.out.flush();
    }

    pub(crate) fn err(&mut self, text: &str) {
        let _ = self.err.write_all(format!("{text}\n").as_bytes());
        let _ = self.err.flush();
    }

    fn warnings(&mut self, warnings: &[String]) {
        for warning in warnings {
            self.err(&format!("warning: {warning}"));
        }
    }
}

/// Whether the console goes on after a line.
#[derive(Debug, PartialEq)]
enum Flow {
    Continue,
    Quit,
}

/// Runs one command line against `host`, saying its answer; a refused command says its error
/// and the console goes on.
fn execute<R: Resources>(host: &mut R, line: &str, say: &mut Say<impl Write, impl Write>) -> Flow {
    let command = match parse(line) {
        Ok(Some(command)) => command,
        Ok(None) => return Flow::Continue,
        Err(e) => {
            say.err(&format!("error: {e}"));
            return Flow::Continue;
        }
    };
    let (done, name, outcome) = match command {
        Command::Help => {
            say.out(HELP);
            return Flow::Continue;
        }
        Command::Quit => return Flow::Quit,
        Command::List => {
            list(&host.list(), say);
            return Flow::Continue;
        }
        Command::Start(name) => ("started", name, host.start(name)),
        Command::Stop(name) => ("stopped", name, host.stop(name)),
        Command::Reload(name) => ("reloaded", name, host.reload(name)),
    };
    match outcome {
        Ok(warnings) => {
            let generation = host
                .list()
                .into_iter()
                .find(|row| row.name == name)
                .map(|row| format!(" (generation {})", row.generation));
            say.out(&format!("{done} {name}{}", generation.unwrap_or_default()));
            say.warnings(&warnings);
        }
        Err(e) => say.err(&format!("error: {e}")),
    }
    Flow::Continue
}

/// `list`: `NAME STATE (details)` per resource, its last error indented below.
fn list(rows: &[Row], say: &mut Say<impl Write, impl Write>) {
    if rows.is_empty() {
        say.out("no resources");
    }
    for row in rows {
        // Generation 0 is no generation: the resource has never started.
        let mut details = vec![match row.generation {
            0 => "never started".to_owned(),
            n => format!("generation {n}"),
        }];
        details.push(match row.dependencies.as_slice() {
            [] => "no dependencies".to_owned(),
            deps => format!("depends on {}", deps.join(", ")),
        });
        details.push(match row.exports.as_slice() {
            [] => "no exports".to_owned(),
            exports => format!("exports {}", exports.join(", ")),
        });
        say.out(&format!(
            "{} {} ({})",
            row.name,
            row.state,
            details.join("; ")
        ));
        if let Some(error) = &row.last_error {
            for (at, line) in error.lines().enumerate() {
                let lead = if at == 0 { "last error: " } else { "  " };
                say.out(&format!("  {lead}{line}"));
            }
        }
    }
}

/// Takes commands from `input` and runs frames of `host` every `frame` while it is live, until
/// `quit`, end of input or a message on `signal`; then shuts `host` down, saying what went
/// wrong, and answers how it ended.
pub(crate) fn serve<R: Resources>(
    host: &mut R,
    input: &Receiver<Input>,
    signal: &Receiver<()>,
    frame: Duration,
    say: &mut Say<impl Write, impl Write>,
) -> Ended {
    // A signal channel whose senders are gone can never signal: wait on nothing instead, not
    // on its disconnection, which is always ready.
    let mut signal = signal.clone();
    let mut last = Instant::now();
    let mut next_frame = last + frame;
    let ended = loop {
        let live = host.is_live();
        // Live, the wait ends at the next frame; idle, only the operator or a signal can
        // change anything.
        let wait = if live {
            next_frame.saturating_duration_since(Instant::now())
        } else {
            Duration::MAX
        };
        let taken = select! {
            recv(signal) -> got => match got {
                Ok(()) => break Ended::Signal,
                Err(_) => {
                    signal = never();
                    None
                }
            },
            recv(input) -> got => Some(got.unwrap_or(Input::End)),
            default(wait) => None,
        };
        match taken {
            Some(Input::Line(line)) => match execute(host, &line, say) {
                Flow::Quit => break Ended::Quit,
                Flow::Continue => {}
            },
            Some(Input::TooLong) => say.err(&format!(
                "error: a command line is at most {MAX_LINE} bytes; that one was dropped"
            )),
            Some(Input::End) => break Ended::EndOfInput,
            None => {}
        }
        let now = Instant::now();
        if !live {
            // Frames start counting from the command that made something live.
            last = now;
            next_frame = now + frame;
        } else if now >= next_frame {
            for failure in host.advance(now - last) {
                say.err(&format!("skein: {failure}"));
            }
            last = now;
            // A frame that ran long pushes the next one back rather than bunching frames up.
            next_frame = (next_frame + frame).max(Instant::now());
        }
    };
    say.out(match ended {
        Ended::Quit => "shutting down: quit",
        Ended::EndOfInput => "shutting down: end of input",
        Ended::Signal => "shutting down: signal",
    });
    for problem in host.shutdown() {
        say.err(&format!("skein: {problem}"));
    }
    ended
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::io::Cursor;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    /// A fake host: resources by name with their dependencies; it records every call.
    #[derive(Default)]
    struct Fake {
        rows: Vec<Row>,
        calls: Vec<String>,
        frames: Arc<AtomicUsize>,
        /// Frames to run before `is_live` turns false.
        live_frames: usize,
    }

    impl Fake {
        fn new() -> Fake {
            let row = |name: &str, deps: &[&str], exports: &[&str]| Row {
                name: name.into(),
                state: "running".into(),
                generation: 1,
                dependencies: deps.iter().map(|s| s.to_string()).collect(),
                exports: exports.iter().map(|s| s.to_string()).collect(),
                last_error: None,
            };
            Fake {
                rows: vec![
                    row("store", &[], &["get", "set"]),
                    row("scores", &["store"], &[]),
                ],
                ..Fake::default()
            }
        }

        fn row(&mut self, name: &str) -> Result<&mut Row, String> {
            self.rows
                .iter_mut()
                .find(|r| r.name == name)
                .ok_or_else(|| format!("no resource named '{name}'"))
        }
    }

    impl Resources for Fake {
        type Error = String;

        fn start(&mut self, name: &str) -> Result<Vec<String>, String> {
            self.calls.push(format!("start {name}"));
            let row = self.row(name)?;
            if row.state == "running" {
                return Err(format!("resource '{name}' is already running"));
            }
            row.state = "running".into();
            row.generation += 1;
            Ok(vec![])
        }

        fn stop(&mut self, name: &str) -> Result<Vec<String>, String> {
            self.calls.push(format!("stop {name}"));
            self.row(name)?.state = "stopped".into();
            Ok(match name {
                "store" => vec!["scores depends on store".into()],
                _ => vec![],
            })
        }

        fn reload(&mut self, name: &str) -> Result<Vec<String>, String> {
            self.calls.push(format!("reload {name}"));
            self.row(name)?.generation += 1;
            Ok(vec![])
        }

        fn list(&self) -> Vec<Row> {
            self.rows.clone()
        }

        fn is_live(&self) -> bool {
            self.frames.load(Ordering::Acquire) < self.live_frames
        }

        fn advance(&mut self, _dt: Duration) -> Vec<String> {
            self.frames.fetch_add(1, Ordering::AcqRel);
            vec![]
        }

        fn shutdown(&mut self) -> Vec<String> {
            self.calls.push("shutdown".into());
            vec![]
        }
    }

    /// Runs `lines` then `last` through a console over `host`; answers how it ended, stdout
    /// and stderr.
    fn session(host: &mut Fake, lines: &[&str], last: Input) -> (Ended, String, String) {
        let (to, input) = crossbeam_channel::unbounded();
        for line in lines {
            to.send(Input::Line(line.to_string())).unwrap();
        }
        to.send(last).unwrap();
        drop(to);
        let (_signal_to, signal) = crossbeam_channel::bounded(1);
        let mut say = say();
        let ended = serve(host, &input, &signal, Duration::from_millis(1), &mut say);
        (
            ended,
            String::from_utf8(say.out).unwrap(),
            String::from_utf8(say.err).unwrap(),
        )
    }

    #[test]
    fn list_shows_one_line_per_resource_then_details() {
        let mut host = Fake::new();
        host.rows[1].state = "failed".into();
        host.rows[1].last_error = Some("main.luau:3: boom\nstack traceback:\n  [C]".into());
        let (ended, out, err) = session(&mut host, &["list"], Input::End);
        assert_eq!(ended, Ended::EndOfInput);
        assert_eq!(
            out,
            "store running (generation 1; no dependencies; exports get, set)\n\
             scores failed (generation 1; depends on store; no exports)\n  \
             last error: main.luau:3: boom\n    stack traceback:\n      [C]\n\
             shutting down: end of input\n"
        );
        assert_eq!(err, "");
    }

    #[test]
    fn list_says_never_started_rather_than_generation_0() {
        let mut host = Fake::new();
        host.rows[1].state = "stopped".into();
        host.rows[1].generation = 0;
        let (_, out, _) = session(&mut host, &["list", "start scores", "list"], Input::End);
        assert_eq!(
            out,
            "store running (generation 1; no dependencies; exports get, set)\n\
             scores stopped (never started; depends on store; no exports)\n\
             started scores (generation 1)\n\
             store running (generation 1; no dependencies; exports get, set)\n\
             scores running (generation 1; depends on store; no exports)\n\
             shutting down: end of input\n"
        );
    }

    #[test]
    fn start_stop_reload_reach_the_host_and_say_what_they_did() {
        let mut host = Fake::new();
        let (ended, out, err) = session(
            &mut host,
            &[
                "stop store",
                "  start   store  ",
                "reload scores",
                "quit",
                "list",
            ],
            Input::End,
        );
        assert_eq!(
            ended,
            Ended::Quit,
            "quit ends the console; list after it never runs"
        );
        assert_eq!(
            out,
            "stopped store (generation 1)\nstarted store (generation 2)\n\
             reloaded scores (generation 2)\nshutting down: quit\n"
        );
        assert_eq!(err, "warning: scores depends on store\n");
        assert_eq!(
            host.calls,
            ["stop store", "start store", "reload scores", "shutdown"]
        );
    }

    #[test]
    fn a_failing_command_says_its_error_and_the_console_goes_on() {
        let mut host = Fake::new();
        let (ended, out, err) = session(
            &mut host,
            &["start store", "stop nope", "stop scores"],
            Input::End,
        );
        assert_eq!(ended, Ended::EndOfInput);
        assert_eq!(
            err,
            "error: resource 'store' is already running\nerror: no resource named 'nope'\n"
        );
        assert_eq!(
            out,
            "stopped scores (generation 1)\nshutting down: end of input\n"
        );
    }

    #[test]
    fn bad_commands_are_refused_clearly_and_reach_no_host() {
        let mut host = Fake::new();
        let lines = [
            "frobnicate store",
            "start",
            "stop a b",
            "reload",
            "list all",
            "quit now",
            "help me",
            "",
            "   ",
            "LIST",
        ];
        let (ended, out, err) = session(&mut host, &lines, Input::End);
        assert_eq!(ended, Ended::EndOfInput);
        assert_eq!(out, "shutting down: end of input\n");
        assert_eq!(
            err,
            "error: unknown command 'frobnicate' (help lists the commands)\n\
             error: start needs a resource name: start NAME\n\
             error: stop takes one resource name, not 2: stop NAME\n\
             error: reload needs a resource name: reload NAME\n\
             error: list takes no argument, got 1: all\n\
             error: quit takes no argument, got 1: now\n\
             error: help takes no argument, got 1: me\n\
             error: unknown command 'LIST' (help lists the commands)\n"
        );
        assert_eq!(host.calls, ["shutdown"]);
    }

    #[test]
    fn help_lists_every_command() {
        let mut host = Fake::new();
        let (_, out, _) = session(&mut host, &["help"], Input::End);
        assert_eq!(out, format!("{HELP}\nshutting down: end of input\n"));
        for command in [
            "list",
            "start NAME",
            "stop NAME",
            "reload NAME",
            "help",
            "quit",
        ] {
            assert!(HELP.contains(&format!("\n  {command} ")), "{command}");
        }
    }

    /// The console over `host` with 1 ms frames, its answers dropped.
    fn run(host: &mut Fake, input: &Receiver<Input>, signal: &Receiver<()>) -> Ended {
        serve(host, input, signal, Duration::from_millis(1), &mut say())
    }

    fn say() -> Say<Vec<u8>, Vec<u8>> {
        Say {
            out: Vec::new(),
            err: Vec::new(),
        }
    }

    #[test]
    fn a_signal_ends_the_console_ahead_of_queued_lines_and_shuts_down() {
        let mut host = Fake::new();
        let (to, input) = crossbeam_channel::unbounded();
        to.send(Input::Line("stop scores".into())).unwrap();
        let (signal_to, signal) = crossbeam_channel::bounded(1);
        signal_to.send(()).unwrap();
        let ended = run(&mut host, &input, &signal);
        assert_eq!(ended, Ended::Signal);
        // `select!` takes whichever is ready, so the line may or may not have run first; the
        // signal is never kept waiting behind more than that one.
        assert_eq!(host.calls.last().map(String::as_str), Some("shutdown"));
        assert!(host.calls.len() <= 2, "{:?}", host.calls);
    }

    #[test]
    fn a_dropped_reader_is_an_end_of_input_and_a_dropped_signal_is_no_signal() {
        let mut host = Fake::new();
        let (to, input) = crossbeam_channel::unbounded::<Input>();
        let (signal_to, signal) = crossbeam_channel::bounded(1);
        drop(signal_to);
        to.send(Input::Line("stop scores".into())).unwrap();
        drop(to);
        let ended = run(&mut host, &input, &signal);
        assert_eq!(ended, Ended::EndOfInput);
        assert_eq!(host.calls, ["stop scores", "shutdown"]);
    }

    #[test]
    fn frames_run_while_the_host_is_live_and_the_operator_types_nothing() {
        let mut host = Fake {
            live_frames: 5,
            ..Fake::new()
        };
        let frames = host.frames.clone();
        let (to, input) = crossbeam_channel::unbounded();
        let (_signal_to, signal) = crossbeam_channel::bounded(1);
        let console = std::thread::spawn(move || {
            serve(
                &mut host,
                &input,
                &signal,
                Duration::from_millis(1),
                &mut say(),
            )
        });
        // No line comes while the frames run: the loop must not wait for one.
        let ran = (0..5000).any(|_| {
            std::thread::sleep(Duration::from_millis(2));
            frames.load(Ordering::Acquire) == 5
        });
        assert!(ran, "{} frames ran", frames.load(Ordering::Acquire));
        to.send(Input::End).unwrap();
        assert_eq!(console.join().unwrap(), Ended::EndOfInput);
        // Not live any more, the loop ran no frame while it waited for the line.
        assert_eq!(frames.load(Ordering::Acquire), 5);
    }

    /// Reads `text` as standard input; answers the inputs sent.
    fn inputs(text: &[u8]) -> Vec<Input> {
        let (to, from) = crossbeam_channel::unbounded();
        read_lines(Cursor::new(text.to_vec()), &to);
        drop(to);
        from.iter().collect()
    }

    #[test]
    fn the_reader_splits_lines_and_ends_with_the_input() {
        assert_eq!(
            inputs(b"list\r\nstop store\n\nreload"),
            [
                Input::Line("list".into()),
                Input::Line("stop store".into()),
                Input::Line(String::new()),
                Input::Line("reload".into()),
                Input::End,
            ]
        );
        assert_eq!(inputs(b""), [Input::End]);
        assert_eq!(
            inputs(b"st\xffart\n"),
            [Input::Line("st\u{fffd}art".into()), Input::End]
        );
    }

    #[test]
    fn a_line_at_the_bound_is_taken_and_one_past_it_is_dropped_whole() {
        let at = "x".repeat(MAX_LINE);
        let past = "y".repeat(MAX_LINE + 1);
        let long = "z".repeat(3 * MAX_LINE);
        let text = format!("{at}\n{past}\n{long}\nlist\n");
        assert_eq!(
            inputs(text.as_bytes()),
            [
                Input::Line(at),
                Input::TooLong,
                Input::TooLong,
                Input::Line("list".into()),
                Input::End,
            ]
        );
        let mut host = Fake::new();
        let (_, out, err) = session(&mut host, &[], Input::TooLong);
        assert_eq!(out, "shutting down: end of input\n");
        assert_eq!(
            err,
            "error: a command line is at most 4096 bytes; that one was dropped\n"
        );
    }
}
