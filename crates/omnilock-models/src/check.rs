//! Running a model with stateright's breadth-first checker, and what the
//! run found.

use std::collections::BTreeSet;
use std::fmt::Debug;
use std::hash::Hash;
use std::time::{Duration, Instant};

use stateright::{Checker, Expectation, HasDiscoveries, Model, Path};

/// What one run of the checker found.
#[derive(Debug)]
pub struct Run {
    /// The name the run was given, for the printed summary.
    pub name: String,
    /// Distinct states reached.
    pub unique_states: usize,
    /// States generated, repeats included.
    pub states: usize,
    /// The longest path from an initial state, in steps.
    pub max_depth: usize,
    /// How long the run took.
    pub elapsed: Duration,
    /// Every reachable state was visited.
    pub exhaustive: bool,
    /// The `always` properties that failed, each with a path to a state
    /// that breaks it.
    pub counterexamples: Vec<(&'static str, Trace)>,
    /// The `sometimes` properties seen to hold, each with a path to a
    /// state where it does.
    pub examples: Vec<(&'static str, Trace)>,
    /// The `sometimes` properties seen nowhere.
    pub never_seen: Vec<&'static str>,
}

/// A path through a model: where it starts, its steps, where it ends.
#[derive(Debug)]
pub struct Trace {
    /// The initial state.
    pub first: String,
    /// The steps, in order.
    pub steps: Vec<String>,
    /// The state the steps lead to.
    pub last: String,
}

/// Visits every state `model` can reach, breadth first, checking all its
/// properties in each. Prints a one-line summary on standard error.
pub fn explore<M>(name: &str, model: M) -> Run
where
    M: Model + Send + Sync + 'static,
    M::State: Clone + Debug + Hash + PartialEq + Send + Sync + 'static,
    M::Action: Clone + Debug + PartialEq,
{
    let run = run(name, model, None);
    eprintln!("{}", run.summary());
    run
}

/// Searches `model` for a shortest path to a state that decides
/// `property`: one that breaks it (an `always` property) or one where it
/// holds (a `sometimes` property); one depth more at a time, up to
/// `max_depth` steps. For the broken rule variants, whose counterexample is
/// the point, and for the conditions that are meant to break a rule.
///
/// One depth at a time because the checker, once it has found such a
/// state, still finishes the block of states it was working on and keeps
/// the last one it found, often at the end of a longer path.
pub fn search<M>(name: &str, model: M, property: &'static str, max_depth: usize) -> Run
where
    M: Model + Clone + Send + Sync + 'static,
    M::State: Clone + Debug + Hash + PartialEq + Send + Sync + 'static,
    M::Action: Clone + Debug + PartialEq,
{
    let started = Instant::now();
    let mut depth = 1;
    loop {
        let mut found = run(name, model.clone(), Some((property, depth)));
        let decided = found
            .counterexamples
            .iter()
            .chain(&found.examples)
            .any(|(p, _)| *p == property);
        if decided || depth >= max_depth {
            found.elapsed = started.elapsed();
            eprintln!("{}", found.summary());
            return found;
        }
        depth += 1;
    }
}

fn run<M>(name: &str, model: M, stop_at: Option<(&'static str, usize)>) -> Run
where
    M: Model + Send + Sync + 'static,
    M::State: Clone + Debug + Hash + PartialEq + Send + Sync + 'static,
    M::Action: Clone + Debug + PartialEq,
{
    let started = Instant::now();
    let properties = model.properties();
    let mut builder = model.checker();
    if let Some((property, depth)) = stop_at {
        // States `depth` steps deep are checked; their successors are not.
        builder = builder
            .finish_when(HasDiscoveries::AnyOf(BTreeSet::from([property])))
            .target_max_depth(depth + 1);
    }
    let checker = builder.spawn_bfs().join();
    let mut found = Run {
        name: name.to_string(),
        unique_states: checker.unique_state_count(),
        states: checker.state_count(),
        max_depth: checker.max_depth(),
        elapsed: started.elapsed(),
        exhaustive: stop_at.is_none(),
        counterexamples: Vec::new(),
        examples: Vec::new(),
        never_seen: Vec::new(),
    };
    for property in &properties {
        let discovery = checker.discovery(property.name).map(trace);
        match (&property.expectation, discovery) {
            (Expectation::Sometimes, Some(trace)) => found.examples.push((property.name, trace)),
            (Expectation::Sometimes, None) => found.never_seen.push(property.name),
            (_, Some(trace)) => {
                found.counterexamples.push((property.name, trace));
                found.exhaustive = false;
            }
            (_, None) => {}
        }
    }
    found
}

fn trace<S: Debug, A: Debug>(path: Path<S, A>) -> Trace {
    let path = path.into_vec();
    let steps = path.iter().filter_map(|(_, a)| a.as_ref());
    Trace {
        first: format!("{:?}", path[0].0),
        steps: steps.map(|a| format!("{a:?}")).collect(),
        last: format!("{:?}", path[path.len() - 1].0),
    }
}

impl Run {
    /// One line: the name, the states, the depth, the time, what failed.
    pub fn summary(&self) -> String {
        let failed: Vec<&str> = self.counterexamples.iter().map(|(p, _)| *p).collect();
        format!(
            "model {}: {} unique states ({} generated), depth {}, {:.2} s{}{}",
            self.name,
            self.unique_states,
            self.states,
            self.max_depth,
            self.elapsed.as_secs_f64(),
            if self.exhaustive { ", exhaustive" } else { "" },
            if failed.is_empty() {
                String::new()
            } else {
                format!(", counterexample to {failed:?}")
            }
        )
    }

    /// Panics unless every `always` property held in every reachable state,
    /// every `sometimes` property was seen, and the run reached at least
    /// `min_states` states (a model that collapses to a few states checks
    /// nothing).
    pub fn assert_holds(&self, min_states: usize) {
        if let Some((property, trace)) = self.counterexamples.first() {
            panic!("{}: \"{property}\" fails:\n{}", self.name, trace.show());
        }
        assert!(
            self.exhaustive,
            "{}: not every state was visited",
            self.name
        );
        assert!(
            self.never_seen.is_empty(),
            "{}: never reached {:?}",
            self.name,
            self.never_seen
        );
        assert!(
            self.unique_states >= min_states,
            "{}: only {} states (at least {min_states} expected)",
            self.name,
            self.unique_states
        );
    }

    /// The path to a state that breaks `property` (printed); panics if the
    /// run found none.
    pub fn counterexample(&self, property: &str) -> &Trace {
        self.path_to(&self.counterexamples, property, "a counterexample to")
    }

    /// The path to a state where the `sometimes` property `property`
    /// holds (printed); panics if the run found none.
    pub fn example(&self, property: &str) -> &Trace {
        self.path_to(&self.examples, property, "an example of")
    }

    fn path_to<'a>(
        &self,
        found: &'a [(&'static str, Trace)],
        property: &str,
        what: &str,
    ) -> &'a Trace {
        let Some((_, trace)) = found.iter().find(|(p, _)| *p == property) else {
            panic!(
                "{}: expected {what} \"{property}\", found none in {} states",
                self.name, self.unique_states
            );
        };
        eprintln!(
            "model {}: {what} \"{property}\" in {} steps:\n{}",
            self.name,
            trace.steps.len(),
            trace.show()
        );
        trace
    }
}

impl Trace {
    /// The trace, a line for each state and step.
    pub fn show(&self) -> String {
        format!(
            "  from {}\n  {}\n  to {}",
            self.first,
            self.steps.join("\n  "),
            self.last
        )
    }
}
