//! The log's writer: a line is appended to a queue in memory, and a thread of its own writes
//! all that is queued to the sink at once, so that a request never waits for standard error
//! (a slow terminal or pipe) while the queue has room.
//!
//! What a line costs its caller is a lock, a copy and, only when the thread sleeps, a wake:
//! no allocation, and no system call while the thread is awake. Nothing is dropped: a line
//! that finds the queue full waits until the thread has taken what is queued. The thread
//! writes each batch with one call (one `write(2)` on standard error); when the queue is
//! empty it first waits [`LINGER`] for more, which no line has to wake it from, and only then
//! sleeps. Dropping the [`Guard`] writes out what is still queued.

use std::io::{self, Write};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use tracing_subscriber::fmt::MakeWriter;

/// How many bytes may wait in the queue (about 16,000 lease lines) before a line waits for
/// room: what absorbs a burst, or a sink that stalls for a moment.
const ROOM: usize = 4 << 20;

/// How long the thread waits for more lines before it sleeps: under load a batch gathers
/// the lines of a millisecond, and the thread wakes a thousand times a second at most, by
/// its own timer, instead of being woken by a system call for each line that finds it
/// asleep (each line of one client, a millisecond or less apart). The price: a line may
/// reach the sink a millisecond after it was logged.
const LINGER: Duration = Duration::from_millis(1);

/// The lines on their way to the sink, given to the subscriber as its writer. Each write is
/// queued whole, so the lines of threads logging at once are never interleaved. A write
/// after the [`Guard`] was dropped is dropped: nothing writes the queue any more.
pub struct Queue(Arc<Shared>);

/// Keep it until the process ends: dropping it writes out what is queued (waiting for the
/// sink as long as it takes), then ends the thread.
pub struct Guard {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

struct Shared {
    state: Mutex<State>,
    /// Wakes the thread when it sleeps (and only then: a wake is a system call).
    work: Condvar,
    /// Wakes the lines waiting for room, once the thread has taken what was queued.
    room: Condvar,
    /// [`ROOM`], or less in a test.
    limit: usize,
}

#[derive(Default)]
struct State {
    queued: Vec<u8>,
    /// The thread waits for `work` without a timeout: the next line must wake it.
    asleep: bool,
    /// Lines waiting for `room`.
    waiting: usize,
    /// The guard was dropped: the thread writes what is queued and ends.
    closed: bool,
}

/// Starts the thread that writes to `sink`: the subscriber's writer and its guard.
pub fn start(sink: impl Write + Send + 'static) -> io::Result<(Queue, Guard)> {
    start_with_room(sink, ROOM)
}

fn start_with_room(sink: impl Write + Send + 'static, limit: usize) -> io::Result<(Queue, Guard)> {
    let shared = Arc::new(Shared {
        state: Mutex::default(),
        work: Condvar::new(),
        room: Condvar::new(),
        limit,
    });
    let writer = Arc::clone(&shared);
    let thread = std::thread::Builder::new()
        .name("fencelock-log".into())
        .spawn(move || writer.write_queued(sink))?;
    let guard = Guard {
        shared: Arc::clone(&shared),
        thread: Some(thread),
    };
    Ok((Queue(shared), guard))
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // No code panics while holding it; if some did, the queue is still whole bytes.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn wait<'a>(&self, on: &Condvar, state: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        on.wait(state).unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `line` once there is room for it (at once if the queue is empty, whatever its
    /// length).
    fn push(&self, line: &[u8]) {
        let mut state = self.lock();
        while !state.closed && !state.queued.is_empty() && state.queued.len() + line.len() > self.limit {
            // The thread may be lingering: a full queue is worth a wake.
            self.work.notify_one();
            state.waiting += 1;
            state = self.wait(&self.room, state);
            state.waiting -= 1;
        }
        if state.closed {
            return;
        }
        state.queued.extend_from_slice(line);
        let wake = std::mem::take(&mut state.asleep);
        drop(state);
        if wake {
            self.work.notify_one();
        }
    }

    /// The thread's loop: takes all that is queued (swapped with the batch it wrote last, so
    /// neither is reallocated once grown), writes it, and lingers, then sleeps, while
    /// nothing is queued.
    fn write_queued(&self, mut sink: impl Write) {
        let mut batch = Vec::new();
        loop {
            let mut state = self.lock();
            if state.queued.is_empty() && !state.closed {
                state = self
                    .work
                    .wait_timeout(state, LINGER)
                    .unwrap_or_else(PoisonError::into_inner)
                    .0;
            }
            while state.queued.is_empty() && !state.closed {
                state.asleep = true;
                state = self.wait(&self.work, state);
            }
            if state.queued.is_empty() {
                break;
            }
            std::mem::swap(&mut state.queued, &mut batch);
            let waiting = state.waiting > 0;
            drop(state);
            if waiting {
                self.room.notify_all();
            }
            // A sink that fails (a closed pipe) loses the batch: there is nowhere to say so.
            let _ = sink.write_all(&batch).and_then(|()| sink.flush());
            batch.clear();
        }
    }
}

impl Write for &Queue {
    fn write(&mut self, line: &[u8]) -> io::Result<usize> {
        self.0.push(line);
        Ok(line.len())
    }

    /// Does not wait for the sink: the [`Guard`] does, at the end.
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Queue {
    type Writer = &'a Queue;

    fn make_writer(&'a self) -> &'a Queue {
        self
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        // Asleep or lingering, the thread is to write what is queued and end now.
        self.shared.work.notify_one();
        if let Some(thread) = self.thread.take() {
            // The thread ends once the queue is empty; a panic of the sink's has been printed.
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::time::{Duration, Instant};

    use super::*;

    /// A sink that keeps what it is given, and whether it was flushed after the last write.
    #[derive(Clone, Default)]
    struct Kept(Arc<Mutex<(Vec<u8>, bool)>>);

    impl Kept {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().unwrap().0.clone()).unwrap()
        }

        fn flushed(&self) -> bool {
            self.0.lock().unwrap().1
        }
    }

    impl Write for Kept {
        fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
            let mut kept = self.0.lock().unwrap();
            kept.0.extend_from_slice(bytes);
            kept.1 = false;
            Ok(bytes.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            self.0.lock().unwrap().1 = true;
            Ok(())
        }
    }

    /// A sink whose first write says it began (on `began`) and then waits until `open`
    /// says go: a terminal that stalls.
    struct Stalled {
        kept: Kept,
        began: Option<mpsc::Sender<()>>,
        open: mpsc::Receiver<()>,
    }

    impl Write for Stalled {
        fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
            if let Some(began) = self.began.take() {
                began.send(()).unwrap();
                self.open.recv().unwrap();
            }
            self.kept.write(bytes)
        }

        fn flush(&mut self) -> io::Result<()> {
            self.kept.flush()
        }
    }

    /// A stalled sink, with what it keeps, the word that its first write began, and the
    /// sender that lets it go on.
    fn stalled() -> (Stalled, Kept, mpsc::Receiver<()>, mpsc::Sender<()>) {
        let (began, first) = mpsc::channel();
        let (go, open) = mpsc::channel();
        let kept = Kept::default();
        let sink = Stalled {
            kept: kept.clone(),
            began: Some(began),
            open,
        };
        (sink, kept, first, go)
    }

    fn line(writer: usize, n: usize) -> String {
        format!("writer {writer} line {n}\n")
    }

    fn log(queue: &Queue, text: &str) {
        let mut writer = queue.make_writer();
        writer.write_all(text.as_bytes()).unwrap();
    }

    /// Polls `done` until it holds, failing after ten seconds.
    fn eventually(what: &str, done: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !done() {
            assert!(Instant::now() < deadline, "{what}: not within ten seconds");
            std::thread::yield_now();
        }
    }

    #[test]
    fn lines_reach_the_sink_in_order() {
        let kept = Kept::default();
        let (queue, guard) = start(kept.clone()).unwrap();
        let lines: Vec<String> = (0..10_000).map(|n| line(0, n)).collect();
        for line in &lines {
            log(&queue, line);
        }
        drop(guard);
        assert_eq!(kept.text(), lines.concat());
    }

    #[test]
    fn dropping_the_guard_writes_what_is_queued_and_flushes() {
        let (sink, kept, first, go) = stalled();
        let (queue, guard) = start(sink).unwrap();
        log(&queue, "first\n");
        first.recv().unwrap();
        // Queued while the sink stalls on the first line: only the guard can see them out.
        log(&queue, "second\n");
        log(&queue, "third\n");
        go.send(()).unwrap();
        drop(guard);
        assert_eq!(kept.text(), "first\nsecond\nthird\n");
        assert!(kept.flushed(), "the sink is flushed after the last batch");
    }

    #[test]
    fn a_full_queue_makes_the_line_wait_for_room_not_drop() {
        let (sink, kept, first, go) = stalled();
        let room = 3 * line(0, 0).len();
        let (queue, guard) = start_with_room(sink, room).unwrap();
        let queue = Arc::new(queue);
        log(&queue, &line(0, 0));
        first.recv().unwrap();
        // The thread holds line 0 in the stalled sink; lines 1 to 3 fill the queue.
        for n in 1..=3 {
            log(&queue, &line(0, n));
        }
        let waiting = {
            let queue = Arc::clone(&queue);
            std::thread::spawn(move || log(&queue, &line(0, 4)))
        };
        eventually("line 4 waits for room", || queue.0.lock().waiting == 1);
        assert!(!waiting.is_finished());
        assert_eq!(kept.text(), "", "the sink has written nothing yet");
        go.send(()).unwrap();
        waiting.join().unwrap();
        drop(guard);
        assert_eq!(kept.text(), (0..=4).map(|n| line(0, n)).collect::<String>());
    }

    #[test]
    fn writers_at_once_on_a_full_queue_lose_nothing() {
        let kept = Kept::default();
        // Room for about two lines: nearly every line waits.
        let (queue, guard) = start_with_room(kept.clone(), 2 * line(0, 0).len()).unwrap();
        let (writers, lines) = (4, 2_000);
        std::thread::scope(|scope| {
            for writer in 0..writers {
                let queue = &queue;
                scope.spawn(move || (0..lines).for_each(|n| log(queue, &line(writer, n))));
            }
        });
        drop(guard);
        let text = kept.text();
        assert_eq!(text.lines().count(), writers * lines);
        for writer in 0..writers {
            let own: Vec<&str> = text
                .lines()
                .filter(|l| l.starts_with(&format!("writer {writer} ")))
                .collect();
            let expected: Vec<String> = (0..lines)
                .map(|n| line(writer, n).trim_end().to_owned())
                .collect();
            assert_eq!(own, expected, "writer {writer}'s lines, whole and in order");
        }
    }
}
