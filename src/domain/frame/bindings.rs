//! The handlers scripts bind to contexts: [`Bindings`], a part of each generation, and
//! `@skein/context`, the engine VM's module that binds them.
//!
//! Handlers run on the engine thread, one after another, in a fixed order: contexts by priority
//! (higher first), contexts of equal priority in the order the host declared them, and a
//! context's handlers for one phase in the order scripts bound them. No hash map decides
//! anything.
//!
//! The invariants of [`Bindings`]: each phase's handler list is in run order at all times (a
//! bind inserts in place, making a new list); a phase runs a snapshot, so what is bound while
//! it runs runs from its next run on; the context declarations and their checked grants
//! outlive generations, the handlers do not; a handler never holds capabilities the code that
//! bound it lacks.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use mlua::{Function, Lua, Table, Value};

use crate::domain::frame::context::ContextSpec;
use crate::domain::frame::handler_label::HandlerLabel;
use crate::error::Result;
use crate::jobs::PrincipalShared;
use crate::principal::capability::{lacking, Authority, CapabilitySet, Grant};
use crate::principal::Generation;
use crate::principal::Phase;
use crate::vm::{self, Owner};

/// Registry key of the engine VM's `@skein/context` table.
pub(crate) const CONTEXT_KEY: &str = "skein.context";

/// What `context.bind` raises outside the engine VM.
const WORKER_BIND: &str =
    "context.bind: handlers bind only in the engine VM; a worker VM runs jobs, not phases";

/// One handler a script bound.
#[derive(Clone)]
pub(crate) struct Binding {
    /// Index of its context in the declared list.
    pub(crate) context: usize,
    pub(crate) phase: Phase,
    pub(crate) handler: Function,
}

/// How many phases there are: one handler list each.
const PHASES: usize = Phase::ALL.len();

/// The host's context declarations and the handlers scripts bound to them, in bind order.
///
/// The declarations belong to the host and outlive generations; the handlers are functions of
/// one engine VM and are dropped with it ([`clear`](Self::clear)).
pub(crate) struct Bindings {
    contexts: Rc<[ContextSpec]>,
    /// The contexts' names, shared by every timing that names them.
    pub(crate) names: Box<[Arc<str>]>,
    /// Each context's place in run order: priority (higher first), then declaration order.
    rank: Box<[usize]>,
    /// Each phase's handlers, kept in run order as they are bound (a bind is rare, a phase
    /// runs every frame): by their context's rank, then bind order. A bind makes a new list,
    /// so a phase's snapshot of the old one is a reference count, not a copy.
    handlers: RefCell<[Rc<[Binding]>; PHASES]>,
    /// Each context's label for each phase (`context 'game' update handler`), at
    /// `context * PHASES + phase`: the owner identity every call of those handlers shares.
    labels: Box<[Arc<HandlerLabel>]>,
    /// Each context's part of the domain's grant, checked when the domain was made; `None`
    /// for a context that holds the whole grant.
    grants: Box<[Option<Grant>]>,
    /// The capabilities each context's handlers hold (its part, or the whole grant's): what
    /// code binding a handler to it must hold itself.
    held: Rc<[CapabilitySet]>,
    /// The contexts' authorities for one generation (made on first use, again after a restart):
    /// every call of a context's handlers shares one, so a call costs no allocation for it.
    authorities: RefCell<Option<(Generation, Vec<Arc<Authority>>)>>,
}

impl Bindings {
    /// Checks each context's capabilities against the domain's `grant` and keeps their parts.
    ///
    /// # Errors
    /// [`Error::OverDelegation`] for the first context (in declaration order) that asks for
    /// more than `grant`, naming it and what it lacks.
    ///
    /// [`Error::OverDelegation`]: crate::Error::OverDelegation
    pub(crate) fn new(contexts: Vec<ContextSpec>, grant: &Grant) -> Result<Rc<Bindings>> {
        let grants = contexts
            .iter()
            .map(|c| {
                c.get_capabilities()
                    .map(|wanted| grant.narrowed(&format!("context '{}'", c.name()), wanted))
                    .transpose()
            })
            .collect::<std::result::Result<Box<[_]>, _>>()?;
        let held = grants
            .iter()
            .map(|g| g.as_ref().unwrap_or(grant).capabilities().clone())
            .collect();
        let bindings = Bindings::unchecked(contexts);
        Ok(Rc::new(Bindings {
            grants,
            held,
            ..bindings
        }))
    }

    fn unchecked(contexts: Vec<ContextSpec>) -> Bindings {
        let n = contexts.len();
        let mut order: Vec<usize> = (0..contexts.len()).collect();
        // A stable sort keeps declaration order among equal priorities.
        order.sort_by_key(|&i| std::cmp::Reverse(contexts[i].get_priority()));
        let mut rank = vec![0; contexts.len()];
        for (place, &context) in order.iter().enumerate() {
            rank[context] = place;
        }
        let names: Box<[Arc<str>]> = contexts.iter().map(|c| Arc::from(c.name())).collect();
        let labels = names
            .iter()
            .flat_map(|context| {
                Phase::ALL.iter().map(|&phase| {
                    Arc::new(HandlerLabel::Phase {
                        context: context.clone(),
                        phase,
                    })
                })
            })
            .collect();
        Bindings {
            names,
            labels,
            contexts: contexts.into(),
            rank: rank.into(),
            handlers: RefCell::new(Default::default()),
            grants: vec![None; n].into(),
            held: vec![CapabilitySet::new(); n].into(),
            authorities: RefCell::new(None),
        }
    }

    /// The authority context `context`'s handlers run under in the generation `domain` belongs
    /// to: a part of the domain's, attributed to the context.
    pub(crate) fn authority(&self, context: usize, domain: &Authority) -> Arc<Authority> {
        let generation = domain.attribution().generation;
        let mut cache = self.authorities.borrow_mut();
        let (_, made) = match cache.take() {
            Some(kept) if kept.0 == generation => cache.insert(kept),
            _ => {
                let made = self
                    .contexts
                    .iter()
                    .zip(self.grants.iter())
                    .map(|(spec, grant)| {
                        let grant = grant.clone().unwrap_or_else(|| domain.grant().clone());
                        Arc::new(domain.narrowed(grant, Some(spec.name())))
                    })
                    .collect();
                cache.insert((generation, made))
            }
        };
        made[context].clone()
    }

    pub(crate) fn contexts(&self) -> &[ContextSpec] {
        &self.contexts
    }

    /// The capabilities each context's handlers hold, in declaration order.
    pub(crate) fn held(&self) -> Rc<[CapabilitySet]> {
        self.held.clone()
    }

    /// The bindings of a new generation: the host's contexts (and their checked grants), no
    /// handlers yet.
    pub(crate) fn next_generation(&self) -> Rc<Bindings> {
        Rc::new(Bindings {
            contexts: self.contexts.clone(),
            names: self.names.clone(),
            labels: self.labels.clone(),
            rank: self.rank.clone(),
            handlers: RefCell::new(Default::default()),
            grants: self.grants.clone(),
            held: self.held.clone(),
            authorities: RefCell::new(None),
        })
    }

    /// Drops every handler (the generation that bound them has ended).
    pub(crate) fn clear(&self) {
        let handlers: [Rc<[Binding]>; PHASES] = std::mem::take(&mut *self.handlers.borrow_mut());
        drop(handlers);
    }

    /// The handlers of `phase` in run order: a snapshot, so a handler bound while the phase
    /// runs is called from the phase's next run on.
    pub(crate) fn snapshot(&self, phase: Phase) -> Rc<[Binding]> {
        self.handlers.borrow()[phase as usize].clone()
    }

    /// The handlers of `phase` in run order, with their context's index.
    #[cfg(test)]
    fn due(&self, phase: Phase) -> Vec<(usize, Function)> {
        self.snapshot(phase)
            .iter()
            .map(|b| (b.context, b.handler.clone()))
            .collect()
    }

    /// The label of `context`'s handler for `phase`.
    fn label(&self, context: usize, phase: Phase) -> Arc<HandlerLabel> {
        self.labels[context * PHASES + phase as usize].clone()
    }

    /// The owner of one call of context `context`'s handler for `phase`, in the generation of
    /// `principal`: its label, its context's authority, and its context's budget per run (the
    /// principal's run deadline when the context sets none).
    pub(crate) fn call_owner(
        &self,
        context: usize,
        phase: Phase,
        principal: &PrincipalShared,
    ) -> Owner {
        let authority = self.authority(context, &principal.authority);
        let label = self.label(context, phase);
        let deadline = self.contexts[context]
            .get_budget()
            .unwrap_or(principal.max_deadline);
        handler_owner(label, deadline, Some(authority))
    }

    /// Adds a handler after every handler of its phase whose context runs before or with its
    /// context.
    fn insert(&self, binding: Binding) {
        let mut handlers = self.handlers.borrow_mut();
        let slot = &mut handlers[binding.phase as usize];
        let rank = self.rank[binding.context];
        let at = slot.partition_point(|b| self.rank[b.context] <= rank);
        let mut list = slot.to_vec();
        list.insert(at, binding);
        *slot = list.into();
    }

    /// `context.bind(name, handlers)`: checks every entry, then binds them all (or none).
    fn bind(&self, name: Value, handlers: Value) -> mlua::Result<()> {
        let Value::String(name) = name else {
            return Err(refuse(format!(
                "name must be a string, got {}",
                vm::a_type(&name)
            )));
        };
        let wanted = name.as_bytes();
        let Some(index) = self
            .contexts
            .iter()
            .position(|c| c.name().as_bytes() == &wanted[..])
        else {
            let declared: Vec<&str> = self.contexts.iter().map(ContextSpec::name).collect();
            let declared = if declared.is_empty() {
                "none".to_owned()
            } else {
                declared.join(", ")
            };
            return Err(refuse(format!(
                "no context named {} is declared (declared: {declared})",
                vm::quoted(&wanted)
            )));
        };
        let context = &self.contexts[index];
        let name = context.name();
        wider_than_binder(name, &self.held[index]).map_err(refuse)?;
        let Value::Table(table) = handlers else {
            return Err(refuse(format!(
                "handlers must be a table of phase = function, got {}",
                vm::a_type(&handlers)
            )));
        };
        // The fault named is that of the least key, so a table with several faults always
        // names the same one; what is kept while looking is at most one entry a phase.
        let mut bound: Vec<(Phase, Function)> = Vec::new();
        let mut fault: Option<(mlua::LuaString, String)> = None;
        for pair in table.pairs::<Value, Value>() {
            let (key, value) = pair?;
            let Value::String(key) = key else {
                return Err(refuse(format!(
                    "handler keys are phase names, got {}",
                    vm::a_type(&key)
                )));
            };
            let wrong = match std::str::from_utf8(&key.as_bytes())
                .ok()
                .and_then(Phase::from_name)
            {
                None => {
                    let phases: Vec<&str> = Phase::ALL.iter().map(|p| p.name()).collect();
                    Some(format!(
                        "{} is not a phase (phases: {})",
                        vm::quoted(&key.as_bytes()),
                        phases.join(", ")
                    ))
                }
                Some(phase) if !context.schedules(phase) => {
                    let scheduled: Vec<&str> =
                        context.scheduled().iter().map(|p| p.name()).collect();
                    let scheduled = if scheduled.is_empty() {
                        "none".to_owned()
                    } else {
                        scheduled.join(", ")
                    };
                    Some(format!(
                        "context '{name}' does not schedule the '{phase}' phase (it schedules: {scheduled})"
                    ))
                }
                Some(phase) => match value {
                    Value::Function(handler) => {
                        bound.push((phase, handler));
                        None
                    }
                    other => Some(format!(
                        "the '{phase}' handler for context '{name}' must be a function, got {}",
                        vm::a_type(&other)
                    )),
                },
            };
            if let Some(wrong) = wrong {
                let least = fault
                    .as_ref()
                    .is_none_or(|(was, _)| key.as_bytes()[..] < was.as_bytes()[..]);
                if least {
                    fault = Some((key, wrong));
                }
            }
        }
        if let Some((_, wrong)) = fault {
            return Err(refuse(wrong));
        }
        // Bound in key order, as the handlers were always bound.
        bound.sort_by_key(|(phase, _)| phase.name());
        for (phase, handler) in bound {
            self.insert(Binding {
                context: index,
                phase,
                handler,
            });
        }
        Ok(())
    }
}

fn refuse(text: String) -> mlua::Error {
    mlua::Error::runtime(format!("context.bind: {text}"))
}

/// Refuses to bind a handler to context `name`, whose handlers hold `held`, from code that
/// holds less: the handler would run with more than the code that bound it.
pub(crate) fn wider_than_binder(
    name: &str,
    held: &CapabilitySet,
) -> std::result::Result<(), String> {
    let lacking = lacking(held);
    if lacking.is_empty() {
        return Ok(());
    }
    let names: Vec<&str> = lacking.iter().map(|c| c.as_str()).collect();
    Err(format!(
        "a handler bound to context '{name}' would hold capabilities the binding code does \
         not: {}",
        names.join(", ")
    ))
}

/// Installs `@skein/context` in the engine VM: `require("@skein/context")` answers it.
pub(crate) fn install_context_module(lua: &Lua, bindings: &Rc<Bindings>) -> mlua::Result<()> {
    let module: Table = lua.create_table()?;
    let store = bindings.clone();
    module.raw_set(
        "bind",
        lua.create_function(move |_, (name, handlers): (Value, Value)| store.bind(name, handlers))?,
    )?;
    module.set_readonly(true);
    lua.set_named_registry_value(CONTEXT_KEY, module)
}

/// `@skein/context`: the engine VM's module, which its domain keeps in the registry; a VM
/// without one (a worker VM) answers a module whose `bind` raises, since phases run only on
/// the engine thread.
pub(crate) fn context_module(lua: &Lua) -> mlua::Result<Value> {
    vm::registered_or_refusing(lua, CONTEXT_KEY, &[("bind", WORKER_BIND)])
}

/// The owner of one handler call: named `label`, each run held to `deadline`, its tasks under
/// `authority` (the engine VM's own, the domain's, when `None`). The handler's task, the tasks
/// it starts (they share its owner) and what it dispatches (items carry the authority
/// installed when they are made) run as its context.
pub(crate) fn handler_owner(
    label: Arc<HandlerLabel>,
    deadline: Duration,
    authority: Option<Arc<Authority>>,
) -> Owner {
    let owner = Owner::new(label, deadline, None);
    match authority {
        Some(authority) => owner.with_authority(authority),
        None => owner,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tagged(lua: &Lua, tag: &str) -> Value {
        let tag = tag.to_owned();
        Value::Function(lua.create_function(move |_, ()| Ok(tag.clone())).unwrap())
    }

    fn handlers(lua: &Lua, phase: &str, tag: &str) -> Value {
        let t = lua.create_table().unwrap();
        t.raw_set(phase, tagged(lua, tag)).unwrap();
        Value::Table(t)
    }

    fn name(lua: &Lua, s: &str) -> Value {
        Value::String(lua.create_string(s).unwrap())
    }

    #[test]
    fn due_orders_by_priority_then_declaration_then_bind_order() {
        let lua = Lua::new();
        let bindings = Bindings::unchecked(vec![
            ContextSpec::new("low").phases([Phase::Update]).priority(-1),
            ContextSpec::new("a").phases([Phase::Update]),
            ContextSpec::new("high").phases([Phase::Update]).priority(3),
            ContextSpec::new("b").phases([Phase::Update]),
        ]);
        for (context, tag) in [
            ("b", "b1"),
            ("low", "low"),
            ("a", "a"),
            ("high", "high"),
            ("b", "b2"),
        ] {
            bindings
                .bind(name(&lua, context), handlers(&lua, "update", tag))
                .unwrap();
        }
        let order: Vec<String> = bindings
            .due(Phase::Update)
            .into_iter()
            .map(|(_, f)| f.call::<String>(()).unwrap())
            .collect();
        assert_eq!(order, ["high", "a", "b1", "b2", "low"]);
        assert!(bindings.due(Phase::Input).is_empty());
        bindings.clear();
        assert!(bindings.due(Phase::Update).is_empty());
    }
}
