//! The protected resource: a register per lock holding a counter, served
//! over TCP on loopback. Clients read it under the lock and write the value
//! they read plus one, each time with their fencing token.
//!
//! Protocol, one line each way:
//! `R <lock> <token> <client>` → `OK <value>` | `NO <highest token>`;
//! `W <lock> <token> <client> <expected> <new>` → `OK` | `NO <highest token>`.
//!
//! *Fenced*, the register refuses any read or write whose token is below the
//! highest it has seen for that lock (reads count too: a holder that read
//! under an old token must not write after a newer holder read). *Unfenced*,
//! it accepts everything. Either way it records its verdicts, marking stale
//! tokens and writes whose expected value was not the current one (lost
//! updates).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc::UnboundedSender;

use crate::history::{Event, Op, Phase, Source};

#[derive(Default)]
struct Cell {
    value: i64,
    highest: u64,
}

struct Register {
    fenced: bool,
    cells: Mutex<HashMap<String, Cell>>,
    history: UnboundedSender<Event>,
}

/// Starts the register on 127.0.0.1 (a free port); returns its address.
pub async fn start(fenced: bool, history: UnboundedSender<Event>) -> std::io::Result<String> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?.to_string();
    let register = Arc::new(Register {
        fenced,
        cells: Mutex::new(HashMap::new()),
        history,
    });
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(serve(stream, register.clone()));
        }
    });
    Ok(address)
}

async fn serve(stream: TcpStream, register: Arc<Register>) {
    let (read, mut write) = stream.into_split();
    let mut lines = BufReader::new(read).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let answer = register.handle(&line);
        if write.write_all(answer.as_bytes()).await.is_err() {
            return;
        }
    }
}

impl Register {
    fn handle(&self, line: &str) -> String {
        let words: Vec<&str> = line.split_whitespace().collect();
        let number = |i: usize| words.get(i).and_then(|w| w.parse::<i64>().ok());
        let (write, lock, token, client) = match (words.first(), words.get(1), number(2), number(3))
        {
            (Some(&"R"), Some(lock), Some(token), Some(client)) => (false, lock, token, client),
            (Some(&"W"), Some(lock), Some(token), Some(client)) => (true, lock, token, client),
            _ => return format!("ERR bad request {line:?}\n"),
        };
        let (token, client) = (token as u64, client as u32);
        let mut cells = self.cells.lock().unwrap();
        let cell = cells.entry(lock.to_string()).or_default();
        let stale = token < cell.highest;
        let mut event = Event::now(Source::Register, Op::Serve, Phase::Ok)
            .client(client)
            .lock(lock)
            .token(token)
            .detail(if write { "write" } else { "read" });
        event.stale = stale;
        if stale && self.fenced {
            event.phase = Phase::Fail;
            let highest = cell.highest;
            let _ = self.history.send(event);
            return format!("NO {highest}\n");
        }
        cell.highest = cell.highest.max(token);
        let answer = if write {
            let (Some(expected), Some(new)) = (number(4), number(5)) else {
                return format!("ERR bad write {line:?}\n");
            };
            event.lost_update = expected != cell.value;
            cell.value = new;
            event.value = Some(new);
            "OK\n".to_string()
        } else {
            event.value = Some(cell.value);
            format!("OK {}\n", cell.value)
        };
        let _ = self.history.send(event);
        answer
    }
}

/// A client's connection to the register.
pub struct Connection {
    lines: tokio::io::Lines<BufReader<tokio::net::tcp::OwnedReadHalf>>,
    write: tokio::net::tcp::OwnedWriteHalf,
}

/// The register's answer.
#[derive(Debug, PartialEq, Eq)]
pub enum Answer {
    /// Served; a read carries the value.
    Ok(Option<i64>),
    /// Refused: the token was stale.
    Refused,
}

impl Connection {
    /// Connects to the register at `address`.
    pub async fn open(address: &str) -> std::io::Result<Connection> {
        let (read, write) = TcpStream::connect(address).await?.into_split();
        Ok(Connection {
            lines: BufReader::new(read).lines(),
            write,
        })
    }

    async fn ask(&mut self, line: String) -> std::io::Result<Answer> {
        self.write.write_all(line.as_bytes()).await?;
        let answer = self.lines.next_line().await?.unwrap_or_default();
        let mut words = answer.split_whitespace();
        match words.next() {
            Some("OK") => Ok(Answer::Ok(words.next().and_then(|w| w.parse().ok()))),
            Some("NO") => Ok(Answer::Refused),
            _ => Err(std::io::Error::other(format!("register said {answer:?}"))),
        }
    }

    /// Reads `lock`'s value under `token`.
    pub async fn read(&mut self, lock: &str, token: u64, client: u32) -> std::io::Result<Answer> {
        self.ask(format!("R {lock} {token} {client}\n")).await
    }

    /// Writes `new` over `expected` under `token`.
    pub async fn write(
        &mut self,
        lock: &str,
        token: u64,
        client: u32,
        expected: i64,
        new: i64,
    ) -> std::io::Result<Answer> {
        self.ask(format!("W {lock} {token} {client} {expected} {new}\n"))
            .await
    }
}
