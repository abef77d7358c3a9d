-- AutoTuneBench results store, SQLite dialect.
--
-- The database itself refuses untrustworthy rows: every rule below is a CHECK or a trigger, so a raw
-- INSERT that bypasses Python is refused just as the API's is. Each trigger raises
-- 'atb_rule:<rule_name>: <what is wrong>'; the Python layer maps that to IngestRejected(rule=...).
-- Tables holding results are append-only: UPDATE and DELETE are refused. State changes (a quarantine
-- cleared, a campaign finished) are new rows, never edits.
--
-- Porting to a server database: the same tables and rules, written as that database's constraints and
-- triggers (PostgreSQL: CHECK + PL/pgSQL triggers raising with the same rule names).

CREATE TABLE IF NOT EXISTS protocols (
    sha256 TEXT PRIMARY KEY CHECK (length(sha256) = 64),
    version TEXT NOT NULL,
    paired_seeds_required INTEGER NOT NULL CHECK (paired_seeds_required > 0),
    registered_at TEXT NOT NULL
);

CREATE TABLE IF NOT EXISTS devices (
    sha256 TEXT PRIMARY KEY CHECK (length(sha256) = 64),
    backend TEXT NOT NULL CHECK (backend IN ('cpu', 'cuda', 'mlx')),
    fingerprint_json TEXT NOT NULL CHECK (json_valid(fingerprint_json)),
    protocol_version TEXT,
    protocol_sha256 TEXT,
    created_at TEXT NOT NULL
);

CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    device_sha256 TEXT NOT NULL REFERENCES devices(sha256),
    protocol_version TEXT,
    protocol_sha256 TEXT,
    started_at TEXT NOT NULL,
    note TEXT NOT NULL DEFAULT ''
);

CREATE TABLE IF NOT EXISTS ceilings (
    session_id TEXT PRIMARY KEY REFERENCES sessions(id),
    device_sha256 TEXT NOT NULL REFERENCES devices(sha256),
    bytes_per_s REAL NOT NULL CHECK (bytes_per_s > 0),
    flops_per_s REAL NOT NULL CHECK (flops_per_s > 0),
    method TEXT NOT NULL,
    protocol_version TEXT,
    protocol_sha256 TEXT,
    created_at TEXT NOT NULL
);

CREATE TABLE IF NOT EXISTS tasks (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL CHECK (kind IN ('kernel', 'engine')),
    source_sha256 TEXT NOT NULL,
    metadata_json TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(metadata_json)),
    protocol_version TEXT,
    protocol_sha256 TEXT,
    created_at TEXT NOT NULL
);

CREATE TABLE IF NOT EXISTS candidates (
    sha256 TEXT PRIMARY KEY CHECK (length(sha256) = 64),
    kind TEXT NOT NULL CHECK (kind IN ('kernel', 'engine')),
    content TEXT NOT NULL,
    protocol_version TEXT,
    protocol_sha256 TEXT,
    created_at TEXT NOT NULL
);

CREATE TABLE IF NOT EXISTS measurement_sets (
    id TEXT PRIMARY KEY,
    session_id TEXT NOT NULL REFERENCES sessions(id),
    device_sha256 TEXT NOT NULL REFERENCES devices(sha256),
    task_id TEXT NOT NULL,
    subject_sha256 TEXT NOT NULL,
    arm TEXT NOT NULL CHECK (arm IN ('candidate', 'baseline')),
    kind TEXT NOT NULL CHECK (kind IN ('kernel', 'engine')),
    unit TEXT NOT NULL CHECK (unit IN ('ns', 'requests_per_s')),
    protocol_version TEXT,
    protocol_sha256 TEXT,
    created_at TEXT NOT NULL
);

CREATE TABLE IF NOT EXISTS measurements (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    set_id TEXT NOT NULL REFERENCES measurement_sets(id),
    seed INTEGER NOT NULL,
    samples_json TEXT NOT NULL CHECK (json_valid(samples_json) AND json_type(samples_json) = 'array'
                                      AND json_array_length(samples_json) > 0),
    protocol_version TEXT,
    protocol_sha256 TEXT,
    UNIQUE (set_id, seed)
);

CREATE TABLE IF NOT EXISTS verdicts (
    id TEXT PRIMARY KEY,
    session_id TEXT NOT NULL REFERENCES sessions(id),
    device_sha256 TEXT NOT NULL REFERENCES devices(sha256),
    task_id TEXT NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('kernel', 'engine')),
    candidate_sha256 TEXT NOT NULL,
    baseline_sha256 TEXT NOT NULL,
    baseline_label TEXT NOT NULL CHECK (length(baseline_label) > 0),
    status TEXT NOT NULL CHECK (status IN ('accepted', 'rejected', 'quarantined')),
    correct INTEGER NOT NULL CHECK (correct IN (0, 1)),
    reason TEXT NOT NULL DEFAULT '',
    ratio REAL CHECK (ratio IS NULL OR ratio > 0),
    ci_low REAL,
    ci_high REAL,
    candidate_set_id TEXT REFERENCES measurement_sets(id),
    baseline_set_id TEXT REFERENCES measurement_sets(id),
    gates_json TEXT,
    detail_json TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(detail_json)),
    protocol_version TEXT,
    protocol_sha256 TEXT,
    created_at TEXT NOT NULL
);

-- A quarantined verdict stays quarantined until a review row clears it (the extended pass).
CREATE TABLE IF NOT EXISTS quarantine_reviews (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    verdict_id TEXT NOT NULL REFERENCES verdicts(id),
    cleared INTEGER NOT NULL CHECK (cleared IN (0, 1)),
    reason TEXT NOT NULL CHECK (length(reason) > 0),
    extended_verdict_id TEXT REFERENCES verdicts(id),
    protocol_version TEXT,
    protocol_sha256 TEXT,
    created_at TEXT NOT NULL
);

CREATE TABLE IF NOT EXISTS preregistrations (
    id TEXT PRIMARY KEY,
    spec_sha256 TEXT NOT NULL UNIQUE CHECK (length(spec_sha256) = 64),
    spec_json TEXT NOT NULL CHECK (json_valid(spec_json)),
    protocol_version TEXT,
    protocol_sha256 TEXT,
    created_at TEXT NOT NULL
);

CREATE TABLE IF NOT EXISTS campaigns (
    id TEXT PRIMARY KEY,
    task_id TEXT NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('kernel', 'engine')),
    tuner_spec TEXT NOT NULL,
    seed INTEGER NOT NULL,
    budget INTEGER NOT NULL CHECK (budget > 0),
    session_id TEXT NOT NULL REFERENCES sessions(id),
    device_sha256 TEXT NOT NULL REFERENCES devices(sha256),
    preregistration_id TEXT REFERENCES preregistrations(id),
    arm TEXT,
    config_json TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(config_json)),
    protocol_version TEXT,
    protocol_sha256 TEXT,
    created_at TEXT NOT NULL,
    CHECK ((preregistration_id IS NULL) = (arm IS NULL))
);

CREATE TABLE IF NOT EXISTS iterations (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    campaign_id TEXT NOT NULL REFERENCES campaigns(id),
    idx INTEGER NOT NULL CHECK (idx >= 0),
    candidate_sha256 TEXT,
    verdict_id TEXT REFERENCES verdicts(id),
    usable INTEGER NOT NULL CHECK (usable IN (0, 1)),
    unusable_reason TEXT NOT NULL DEFAULT '',
    tokens_in INTEGER NOT NULL DEFAULT 0,
    tokens_out INTEGER NOT NULL DEFAULT 0,
    cost_usd REAL NOT NULL DEFAULT 0,
    model_calls INTEGER NOT NULL DEFAULT 0,
    truncated_calls INTEGER NOT NULL DEFAULT 0,
    detail_json TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(detail_json)),
    protocol_version TEXT,
    protocol_sha256 TEXT,
    created_at TEXT NOT NULL,
    UNIQUE (campaign_id, idx),
    CHECK (usable = 0 OR verdict_id IS NOT NULL),
    CHECK (usable = 1 OR length(unusable_reason) > 0)
);

CREATE TABLE IF NOT EXISTS campaign_outcomes (
    campaign_id TEXT PRIMARY KEY REFERENCES campaigns(id),
    status TEXT NOT NULL CHECK (status IN ('completed', 'infrastructure_defect', 'aborted')),
    truncated_fraction REAL NOT NULL DEFAULT 0,
    reason TEXT NOT NULL DEFAULT '',
    detail_json TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(detail_json)),
    protocol_version TEXT,
    protocol_sha256 TEXT,
    created_at TEXT NOT NULL,
    CHECK (status = 'completed' OR length(reason) > 0)
);

-- Free-form evidence documents (anchors, retests, remeasures, A/B outcomes), stamped like any row.
CREATE TABLE IF NOT EXISTS reports (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    subject TEXT NOT NULL,
    body_json TEXT NOT NULL CHECK (json_valid(body_json)),
    protocol_version TEXT,
    protocol_sha256 TEXT,
    created_at TEXT NOT NULL
);

-- ---------------------------------------------------------------- verdict rules
CREATE TRIGGER IF NOT EXISTS verdict_rules BEFORE INSERT ON verdicts
BEGIN
    SELECT RAISE(ABORT, 'atb_rule:verdict_without_gate_results: a verdict must carry a non-empty JSON array of gate results')
    WHERE NEW.gates_json IS NULL OR NOT json_valid(NEW.gates_json)
          OR json_type(NEW.gates_json) != 'array' OR json_array_length(NEW.gates_json) = 0;
    SELECT RAISE(ABORT, 'atb_rule:malformed_gate_result: every gate result needs a name and a boolean passed')
    WHERE EXISTS (SELECT 1 FROM json_each(NEW.gates_json)
                  WHERE json_type(value, '$.name') IS NOT 'text'
                     OR json_type(value, '$.passed') NOT IN ('true', 'false'));
    SELECT RAISE(ABORT, 'atb_rule:accepted_with_failed_gate: an accepted verdict needs every gate passed')
    WHERE NEW.status = 'accepted'
      AND EXISTS (SELECT 1 FROM json_each(NEW.gates_json) WHERE json_type(value, '$.passed') != 'true');
    SELECT RAISE(ABORT, 'atb_rule:accepted_but_incorrect: an accepted verdict must be correct')
    WHERE NEW.status = 'accepted' AND NEW.correct != 1;
    SELECT RAISE(ABORT, 'atb_rule:quarantine_without_reason: a quarantined verdict must store its reason')
    WHERE NEW.status = 'quarantined' AND length(NEW.reason) = 0;
    SELECT RAISE(ABORT, 'atb_rule:ratio_without_measurements: a ratio needs a candidate and a baseline measurement set')
    WHERE NEW.ratio IS NOT NULL AND (NEW.candidate_set_id IS NULL OR NEW.baseline_set_id IS NULL);
    SELECT RAISE(ABORT, 'atb_rule:verdict_without_ratio: accepted and quarantined verdicts need a measured ratio')
    WHERE NEW.status IN ('accepted', 'quarantined') AND NEW.ratio IS NULL;
    SELECT RAISE(ABORT, 'atb_rule:ratio_outside_interval: the ratio must lie within its confidence interval')
    WHERE NEW.ratio IS NOT NULL AND (NEW.ci_low IS NULL OR NEW.ci_high IS NULL
                                      OR NEW.ci_low > NEW.ratio OR NEW.ci_high < NEW.ratio);
    SELECT RAISE(ABORT, 'atb_rule:measurement_set_missing: a referenced measurement set does not exist')
    WHERE (NEW.candidate_set_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM measurement_sets WHERE id = NEW.candidate_set_id))
       OR (NEW.baseline_set_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM measurement_sets WHERE id = NEW.baseline_set_id));
    SELECT RAISE(ABORT, 'atb_rule:arm_mismatch: candidate_set_id must name a candidate arm and baseline_set_id a baseline arm')
    WHERE (NEW.candidate_set_id IS NOT NULL AND (SELECT arm FROM measurement_sets WHERE id = NEW.candidate_set_id) != 'candidate')
       OR (NEW.baseline_set_id IS NOT NULL AND (SELECT arm FROM measurement_sets WHERE id = NEW.baseline_set_id) != 'baseline');
    SELECT RAISE(ABORT, 'atb_rule:cross_device_ratio: candidate and baseline were measured on different device fingerprints')
    WHERE NEW.candidate_set_id IS NOT NULL AND NEW.baseline_set_id IS NOT NULL AND (
          (SELECT device_sha256 FROM measurement_sets WHERE id = NEW.candidate_set_id)
       != (SELECT device_sha256 FROM measurement_sets WHERE id = NEW.baseline_set_id)
       OR (SELECT device_sha256 FROM measurement_sets WHERE id = NEW.candidate_set_id) != NEW.device_sha256);
    SELECT RAISE(ABORT, 'atb_rule:cross_session_ratio: candidate and baseline were measured in different measurement sessions')
    WHERE NEW.candidate_set_id IS NOT NULL AND NEW.baseline_set_id IS NOT NULL AND (
          (SELECT session_id FROM measurement_sets WHERE id = NEW.candidate_set_id)
       != (SELECT session_id FROM measurement_sets WHERE id = NEW.baseline_set_id)
       OR (SELECT session_id FROM measurement_sets WHERE id = NEW.candidate_set_id) != NEW.session_id);
    SELECT RAISE(ABORT, 'atb_rule:cross_task_ratio: candidate and baseline measure different tasks')
    WHERE NEW.candidate_set_id IS NOT NULL AND NEW.baseline_set_id IS NOT NULL AND (
          (SELECT task_id FROM measurement_sets WHERE id = NEW.candidate_set_id)
       != (SELECT task_id FROM measurement_sets WHERE id = NEW.baseline_set_id)
       OR (SELECT task_id FROM measurement_sets WHERE id = NEW.candidate_set_id) != NEW.task_id);
    SELECT RAISE(ABORT, 'atb_rule:unpaired_seeds: candidate and baseline measurements do not share the same seed set')
    WHERE NEW.candidate_set_id IS NOT NULL AND NEW.baseline_set_id IS NOT NULL AND (
          EXISTS (SELECT seed FROM measurements WHERE set_id = NEW.candidate_set_id
                  EXCEPT SELECT seed FROM measurements WHERE set_id = NEW.baseline_set_id)
       OR EXISTS (SELECT seed FROM measurements WHERE set_id = NEW.baseline_set_id
                  EXCEPT SELECT seed FROM measurements WHERE set_id = NEW.candidate_set_id));
    SELECT RAISE(ABORT, 'atb_rule:too_few_paired_seeds: fewer paired seeds than the protocol requires')
    WHERE NEW.candidate_set_id IS NOT NULL
      AND (SELECT count(DISTINCT seed) FROM measurements WHERE set_id = NEW.candidate_set_id)
        < (SELECT paired_seeds_required FROM protocols WHERE sha256 = NEW.protocol_sha256);
    SELECT RAISE(ABORT, 'atb_rule:protocol_mismatch: measurements and verdict were made under different protocols')
    WHERE NEW.candidate_set_id IS NOT NULL AND NEW.baseline_set_id IS NOT NULL AND (
          (SELECT protocol_sha256 FROM measurement_sets WHERE id = NEW.candidate_set_id) IS NOT NEW.protocol_sha256
       OR (SELECT protocol_sha256 FROM measurement_sets WHERE id = NEW.baseline_set_id) IS NOT NEW.protocol_sha256);
    SELECT RAISE(ABORT, 'atb_rule:session_device_mismatch: the verdict names a device other than its session''s')
    WHERE (SELECT device_sha256 FROM sessions WHERE id = NEW.session_id) IS NOT NEW.device_sha256;
END;

CREATE TRIGGER IF NOT EXISTS measurement_set_rules BEFORE INSERT ON measurement_sets
BEGIN
    SELECT RAISE(ABORT, 'atb_rule:session_device_mismatch: a measurement set names a device other than its session''s')
    WHERE (SELECT device_sha256 FROM sessions WHERE id = NEW.session_id) IS NOT NEW.device_sha256;
END;

-- A measurement set is sealed once a verdict uses it: seeds cannot be added afterwards.
CREATE TRIGGER IF NOT EXISTS measurement_sealed BEFORE INSERT ON measurements
BEGIN
    SELECT RAISE(ABORT, 'atb_rule:measurement_set_sealed: this measurement set is already used by a verdict')
    WHERE EXISTS (SELECT 1 FROM verdicts WHERE candidate_set_id = NEW.set_id OR baseline_set_id = NEW.set_id);
    SELECT RAISE(ABORT, 'atb_rule:measurement_protocol_mismatch: a measurement must carry its set''s protocol digest')
    WHERE (SELECT protocol_sha256 FROM measurement_sets WHERE id = NEW.set_id) IS NOT NEW.protocol_sha256;
END;

CREATE TRIGGER IF NOT EXISTS quarantine_review_rules BEFORE INSERT ON quarantine_reviews
BEGIN
    SELECT RAISE(ABORT, 'atb_rule:review_of_unquarantined_verdict: only a quarantined verdict can be reviewed')
    WHERE (SELECT status FROM verdicts WHERE id = NEW.verdict_id) IS NOT 'quarantined';
END;

CREATE TRIGGER IF NOT EXISTS iteration_rules BEFORE INSERT ON iterations
BEGIN
    SELECT RAISE(ABORT, 'atb_rule:usable_iteration_not_accepted: a usable iteration needs an accepted verdict')
    WHERE NEW.usable = 1 AND (SELECT status FROM verdicts WHERE id = NEW.verdict_id) IS NOT 'accepted';
    SELECT RAISE(ABORT, 'atb_rule:iteration_over_budget: the campaign''s budget is already spent')
    WHERE NEW.idx >= (SELECT budget FROM campaigns WHERE id = NEW.campaign_id);
    SELECT RAISE(ABORT, 'atb_rule:iteration_verdict_other_task: the iteration''s verdict is for another task')
    WHERE NEW.verdict_id IS NOT NULL
      AND (SELECT task_id FROM verdicts WHERE id = NEW.verdict_id) IS NOT (SELECT task_id FROM campaigns WHERE id = NEW.campaign_id);
END;

CREATE TRIGGER IF NOT EXISTS campaign_rules BEFORE INSERT ON campaigns
BEGIN
    SELECT RAISE(ABORT, 'atb_rule:session_device_mismatch: a campaign names a device other than its session''s')
    WHERE (SELECT device_sha256 FROM sessions WHERE id = NEW.session_id) IS NOT NEW.device_sha256;
    SELECT RAISE(ABORT, 'atb_rule:unknown_preregistration: the campaign claims a registration the store does not hold')
    WHERE NEW.preregistration_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM preregistrations WHERE id = NEW.preregistration_id);
END;
