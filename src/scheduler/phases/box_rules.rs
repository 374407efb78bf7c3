//! Box rules in the loop (docs/BEHAVIOUR.md "Rules for a shared box"):
//! our user's usage added to their usage file while our jobs run; the
//! fair-share factors of everyone the ledger knows; the holes a user who
//! goes first needs, kept free of our starts; our user's quota use across
//! their schedulers and reservations; and our waiting jobs' needs,
//! published for the others. Without a rules file none of this runs.

use crate::allocation::{self, GpuLoad, PlaceOptions, Placement, Request};
use crate::ledger::Need;
use crate::ledger::people::Usage;
use crate::rules::fair_share::{self, Standing};
use crate::rules::quota::{QuotaRound, QuotaUse};
use crate::scheduler::Scheduler;
use crate::view::status::{BoxStatus, BoxUser, PersonalReservation, QuotaUseStatus};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

/// How often our accrued usage is added to our usage file while jobs run.
const USAGE_FLUSH: Duration = Duration::from_secs(1);

/// How many waiting jobs' needs a scheduler publishes.
pub(in crate::scheduler) const DEMAND_PUBLISHED: usize = 4;

impl Scheduler {
    /// Reads the box rules again when their file changed (looked at every
    /// [`crate::rules::RULES_CHECK`]): the new rules apply to the next
    /// starts, said on the terminal and the board; running jobs are not
    /// touched. A changed file that cannot be used, or one emptied while
    /// rules were in force, is said once and the rules in force stay.
    pub(in crate::scheduler) fn reload_box_rules(&mut self, now: Instant) {
        let state = &mut self.core.box_state;
        if state
            .checked
            .is_some_and(|t| now < t + crate::rules::RULES_CHECK)
        {
            return;
        }
        state.checked = Some(now);
        let stamp = crate::rules::stamp_of(&state.watched.0);
        if stamp == state.stamp {
            return;
        }
        let (path, given) = state.watched.clone();
        // Emptied while rules were in force: an edit in place (`: >`, an
        // editor writing over the file) caught half-way, not "no rules".
        // The stamp is kept, so the file's next change is read.
        if state.rules.is_some() && stamp.is_some_and(|(_, len, _)| len == 0) {
            let why = format!(
                "box rules {} is empty (truncated while being edited?)",
                path.display()
            );
            if state.problem.as_ref() != Some(&why) {
                state.problem = Some(why.clone());
                self.report.warn(format!(
                    "{why}; the rules in force stay until it holds rules again (edit by writing a new file and renaming it over, or with `install`; remove the file for no rules)"
                ));
            }
            return;
        }
        match crate::rules::load(given.then_some(path.as_path())) {
            Ok(rules) => {
                state.stamp = stamp;
                let was_broken = state.problem.take().is_some();
                if rules == state.rules {
                    // Fine again, as the jobs file says it (`parses again`).
                    if was_broken {
                        self.report.say(format!(
                            "box rules {} parse again; the rules in force are unchanged",
                            path.display()
                        ));
                    }
                    return;
                }
                let said = match &rules {
                    Some(r) => format!(
                        "box rules {} reloaded: {}; they apply to the next starts, running jobs go on",
                        path.display(),
                        r.summary_for(&state.user)
                    ),
                    None => format!(
                        "box rules {} removed: no box rules apply to the next starts",
                        path.display()
                    ),
                };
                state.rules = rules;
                self.report.say(said);
                self.due.dispatch_needed = true;
            }
            Err(e) => {
                let why = e.to_string().replace("; refusing to start", "");
                if state.problem.as_ref() != Some(&why) {
                    state.problem = Some(why.clone());
                    self.report
                        .warn(format!("{why}; the rules in force stay until it is fixed"));
                }
            }
        }
    }

    /// Adds our bookings × the time since the last call to the usage
    /// accrued, and writes it to our usage file (under the ledger lock,
    /// which our other schedulers share) at most every second.
    pub(in crate::scheduler) fn account_usage(&mut self, now: Instant) {
        if self.core.box_state.rules.is_none() || self.ledger_side.ledger.is_none() {
            return;
        }
        if let Some(last) = self.core.box_state.last_accrual {
            let dt = now.saturating_duration_since(last).as_secs_f64();
            let bookings = self.own_bookings();
            let mib: u64 = bookings.iter().map(|b| b.mib).sum();
            self.core.box_state.accrued.0 += mib as f64 * dt;
            self.core.box_state.accrued.1 += bookings.len() as f64 * dt;
        }
        self.core.box_state.last_accrual = Some(now);
        let due = self
            .core
            .box_state
            .last_flush
            .is_none_or(|t| now >= t + USAGE_FLUSH);
        if due && self.core.box_state.accrued != (0.0, 0.0) {
            self.flush_usage(now);
        }
    }

    /// Writes the accrued usage to our usage file.
    pub(in crate::scheduler) fn flush_usage(&mut self, now: Instant) {
        let half_life = self.core.box_state.half_life_s();
        let (mib_s, gpu_s) = self.core.box_state.accrued;
        let now_ms = self.now().ms();
        let Some(ledger) = &mut self.ledger_side.ledger else {
            return;
        };
        let _lock = ledger.lock();
        let written =
            crate::ledger::people::add_usage(ledger.dir(), mib_s, gpu_s, half_life, now_ms);
        self.core.box_state.last_flush = Some(now);
        if written.is_ok() {
            self.core.box_state.accrued = (0.0, 0.0);
        }
    }

    /// Every known user's decayed usage now and share: ours, the
    /// schedulers' in the ledger, and everyone with a usage file, by
    /// name.
    pub(in crate::scheduler) fn standings(&self) -> BTreeMap<String, (Usage, Standing)> {
        let mut out = BTreeMap::new();
        let (Some(rules), Some(ledger)) = (&self.core.box_state.rules, &self.ledger_side.ledger)
        else {
            return out;
        };
        let now = self.now().ms();
        let half_life = self.core.box_state.half_life_s();
        let mut uids: BTreeMap<u32, String> = ledger
            .peers
            .iter()
            .map(|p| (p.uid, p.user.clone()))
            .collect();
        uids.insert(self.core.box_state.uid, self.core.box_state.user.clone());
        for uid in ledger.usage.keys() {
            uids.entry(*uid).or_insert_with(|| ledger.name_of(*uid));
        }
        for (uid, user) in uids {
            let mut usage = ledger
                .usage
                .get(&uid)
                .map(|u| u.at(now, half_life))
                .unwrap_or_default();
            if uid == self.core.box_state.uid {
                usage.mib_s += self.core.box_state.accrued.0;
                usage.gpu_s += self.core.box_state.accrued.1;
            }
            let standing = Standing {
                usage: usage.mib_s,
                share: rules.share_of(&user),
            };
            out.insert(user, (usage, standing));
        }
        out
    }

    /// Every known user's fair-share factor, by name.
    pub(in crate::scheduler) fn fair_share_factors(&self) -> BTreeMap<String, f64> {
        let standings: BTreeMap<String, Standing> = self
            .standings()
            .into_iter()
            .map(|(user, (_, s))| (user, s))
            .collect();
        fair_share::factors(&standings)
    }

    /// Keeps free, on `loads`, the memory that the waiting jobs of each
    /// user whose factor is above ours need and would get there (the
    /// needs their schedulers publish, first job first): it is counted as
    /// booked (and named in [`GpuLoad::fair_share_held`]), so our jobs start
    /// only beside it. Highest factor first.
    pub(in crate::scheduler) fn hold_for_fair_share(&self, loads: &mut [GpuLoad]) {
        let Some(ledger) = self
            .ledger_side
            .ledger
            .as_ref()
            .filter(|_| self.core.box_state.fair_share())
        else {
            return;
        };
        let mut needs: BTreeMap<&str, Vec<Need>> = BTreeMap::new();
        for peer in ledger
            .peers
            .iter()
            .filter(|p| p.uid != self.core.box_state.uid)
        {
            needs.entry(&peer.user).or_default().extend(&peer.demand);
        }
        needs.retain(|_, n| !n.is_empty());
        if needs.is_empty() {
            return;
        }
        let factors = self.fair_share_factors();
        let mine = factors
            .get(&self.core.box_state.user)
            .copied()
            .unwrap_or(1.0);
        let mut ahead: Vec<(f64, &str, Vec<Need>)> = needs
            .into_iter()
            .map(|(user, n)| (factors.get(user).copied().unwrap_or(1.0), user, n))
            .filter(|(f, _, _)| fair_share::goes_first(*f, mine))
            .collect();
        ahead.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(b.1)));
        let opts = PlaceOptions {
            drained_mask: 0,
            exclusive: false,
            ..self.cfg.place.clone()
        };
        for (_, user, needs) in ahead {
            for need in needs {
                let request = Request {
                    vram_mib: need.mib,
                    gpus: need.gpus.max(1),
                    ..Default::default()
                };
                let Placement::Start(chosen) = allocation::place(&request, loads, &opts) else {
                    continue;
                };
                for gpu in loads.iter_mut().filter(|g| chosen.contains(&g.index)) {
                    let hold = need
                        .mib
                        .map_or(gpu.total_mib, |m| m.saturating_add(opts.margin_mib));
                    gpu.booked_mib = gpu.booked_mib.saturating_add(hold);
                    gpu.fair_share_held_mib = gpu.fair_share_held_mib.saturating_add(hold);
                    gpu.fair_share_held.push(user.to_string());
                }
            }
        }
    }

    /// What our user holds box-wide, for the quota: our jobs, our other
    /// schedulers' jobs and our reservations (GPUs by index).
    pub(in crate::scheduler) fn quota_use(&self) -> QuotaUse {
        let mut held = QuotaUse::default();
        let Some(snapshot) = &self.core.gpu.snapshot else {
            return held;
        };
        let index_of: HashMap<&str, u32> = snapshot
            .gpus
            .iter()
            .map(|g| (g.uuid.as_str(), g.index))
            .collect();
        let mut jobs: HashSet<(u32, String)> = HashSet::new();
        let mut count = |uuid: &str, mib: u64, job: Option<(u32, String)>| {
            if let Some(index) = index_of.get(uuid) {
                held.gpus.insert(*index);
            }
            held.vram_mib = held.vram_mib.saturating_add(mib);
            if let Some(job) = job {
                jobs.insert(job);
            }
        };
        let me = std::process::id();
        for b in self.own_bookings() {
            count(&b.gpu_uuid, b.mib, Some((me, b.job.clone())));
        }
        if let Some(ledger) = &self.ledger_side.ledger {
            for f in ledger
                .foreign
                .iter()
                .filter(|f| f.uid == self.core.box_state.uid)
            {
                // A reservation (pid 0) is not a job.
                let job = (f.pid != 0).then(|| (f.pid, f.booking.job.clone()));
                count(&f.booking.gpu_uuid, f.booking.mib, job);
            }
        }
        held.running = jobs.len() as u32;
        held
    }

    /// The box rules and everyone's part in them, for the views; `None`
    /// without a rules file or a ledger.
    pub(in crate::scheduler) fn box_status(&self) -> Option<BoxStatus> {
        let rules = self.core.box_state.rules.as_ref()?;
        let ledger = self.ledger_side.ledger.as_ref()?;
        let standings = self.standings();
        let factors = self.fair_share_factors();
        let fair = self.core.box_state.fair_share();
        let me = &self.core.box_state.user;
        let held = self.quota_use();
        let mut users: BTreeMap<String, BoxUser> = BTreeMap::new();
        let blank = |user: &str| BoxUser {
            user: user.to_string(),
            running: 0,
            pending: 0,
            booked_mib: 0,
            factor: fair.then(|| factors.get(user).copied().unwrap_or(1.0)),
            reservations: 0,
            quota: rules.quota_for(user),
        };
        for user in standings.keys() {
            users.insert(user.clone(), blank(user));
        }
        let mine = users.entry(me.clone()).or_insert_with(|| blank(me));
        mine.running = self.core.running.len() as u64;
        mine.pending = self.core.box_state.pending;
        mine.booked_mib = self.own_bookings().iter().map(|b| b.mib).sum();
        for peer in &ledger.peers {
            let u = users
                .entry(peer.user.clone())
                .or_insert_with(|| blank(&peer.user));
            u.running += peer.running;
            u.pending += peer.pending;
        }
        for f in &ledger.foreign {
            let u = users
                .entry(f.user.clone())
                .or_insert_with(|| blank(&f.user));
            u.booked_mib = u.booked_mib.saturating_add(f.booking.mib);
            if f.pid == 0 {
                u.reservations += 1;
            }
        }
        let (usage, _) = standings.get(me).copied().unwrap_or_default();
        Some(BoxStatus {
            rules_file: rules.path.display().to_string(),
            user: me.clone(),
            fair_share: fair,
            factor: fair.then(|| factors.get(me).copied().unwrap_or(1.0)),
            usage_mib_s: usage.mib_s.round(),
            usage_gpu_s: usage.gpu_s.round(),
            quota: rules.quota_for(me),
            quota_use: QuotaUseStatus {
                gpus: held.gpus.len() as u32,
                vram_mib: held.vram_mib,
                running: held.running,
            },
            users: users.into_values().collect(),
            reservations: ledger
                .reservations
                .iter()
                .map(PersonalReservation::from)
                .collect(),
        })
    }

    /// Our user's quota for a placement round over GPUs of `gpu_mib`, when
    /// it limits anything.
    pub(in crate::scheduler) fn quota_round(&self, gpu_mib: u64) -> Option<QuotaRound> {
        Some(QuotaRound::new(
            self.core.box_state.quota()?,
            self.quota_use(),
            self.core.box_state.user.clone(),
            gpu_mib,
        ))
    }

    /// Publishes our first waiting jobs' needs and how many wait, for the
    /// other schedulers' fair share and views.
    pub(in crate::scheduler) fn set_demand(&mut self, waiting: &[Request], pending: u64) {
        if self.core.box_state.rules.is_none() {
            return;
        }
        let demand = waiting
            .iter()
            .take(DEMAND_PUBLISHED)
            .map(|r| Need {
                mib: r.vram_mib,
                gpus: r.gpus.max(1),
            })
            .collect();
        self.core.box_state.pending = pending;
        if let Some(ledger) = &mut self.ledger_side.ledger {
            ledger.set_demand(demand, pending);
        }
    }
}
