// Live progress on a study's page: server-sent events of the stored progress events update the
// job rows in place. Without this script the page still works: it offers a refresh link. Also:
// forms that destroy something ask for confirmation first, a file too large to upload is
// refused before it is sent, and a new schedule's time zone is the browser's.
"use strict";
(function () {
  // A form that destroys something asks first (data-confirm holds the question).
  document.querySelectorAll("form[data-confirm]").forEach(function (form) {
    form.addEventListener("submit", function (event) {
      if (!window.confirm(form.dataset.confirm)) event.preventDefault();
    });
  });
  // A file past the server's limit is refused here, before minutes of uploading end in a 413.
  document.querySelectorAll("input[type=file][data-max-bytes]").forEach(function (input) {
    input.addEventListener("change", function () {
      const max = Number(input.dataset.maxBytes);
      const file = input.files && input.files[0];
      // As the server writes sizes: 16 MiB, 1.6 MiB, 400000 bytes.
      const mib = function (n) {
        if (n % 1048576 === 0) return n / 1048576 + " MiB";
        return n >= 1048576 ? (n / 1048576).toFixed(1) + " MiB" : n + " bytes";
      };
      input.setCustomValidity(file && max > 0 && file.size > max
        ? file.name + " is " + mib(file.size) + ", more than the " + mib(max) +
          " this workbench takes here; " + (input.dataset.larger || "")
        : "");
      input.reportValidity();
    });
  });
  // A new schedule's time zone defaults to the browser's.
  const zone = document.querySelector("input[data-local-zone]");
  if (zone && window.Intl) {
    const local = Intl.DateTimeFormat().resolvedOptions().timeZone;
    if (local) zone.value = local;
  }
  const section = document.getElementById("progress");
  if (!section || !window.EventSource) return;
  const study = section.dataset.study;
  const live = document.getElementById("live");
  const after = section.dataset.after || "0";
  const version = section.dataset.version;
  const source = new EventSource("/studies/" + encodeURIComponent(study) + "/events?after=" + encodeURIComponent(after) +
    (version ? "&version=" + encodeURIComponent(version) : ""));
  // The study's state as the page was rendered, until the stream says otherwise (so a finished
  // study never reads "following the runs" while the first event is on its way).
  const rendered = document.getElementById("study-state");
  let seenState = rendered ? rendered.textContent.trim() : null;
  function text(row, field, value) {
    const el = row.querySelector('[data-field="' + field + '"]');
    if (el) el.textContent = value;
    return el;
  }
  function duration(s) {
    if (s >= 3600) return (s / 3600).toFixed(1) + " h";
    if (s >= 60) return Math.round(s / 60) + " min";
    return Math.round(s) + " s";
  }
  // What the line above the runs says while connected: a study with nothing running is not
  // "progressing", but a run started now (or from another tab) still shows here live.
  function connected() {
    if (!live || live.className === "notice") return;
    live.textContent = seenState === "running"
      ? "Live: following the runs as they progress."
      : "No run in progress; a new one will show here as it runs.";
  }
  source.addEventListener("open", connected);
  source.addEventListener("progress", function (message) {
    const e = JSON.parse(message.data);
    // A job started: a worker is there after all, and the notice that none was goes.
    const stranded = document.getElementById("stranded");
    if (stranded && e.phase === "started") stranded.remove();
    const row = section.querySelector('tr[data-job="' + e.job + '"]');
    if (!row) return;
    let fraction = null;
    const parts = [];
    if (e.cases) {
      fraction = e.cases.total > 0 ? e.cases.done / e.cases.total : null;
      parts.push(e.cases.done + "/" + e.cases.total + " cases, " + e.cases.passed + " passed, " +
        e.cases.failed + " failed" + (e.cases.errors ? ", " + e.cases.errors + " errors" : ""));
    }
    if (e.load) {
      const within = e.load.total > 0 ? e.load.finished / e.load.total : 0;
      fraction = Math.min(1, (e.load.index + within) / Math.max(1, e.load.steps));
      parts.push("step " + e.load.label + " at " + e.load.offered_rps + " req/s: " +
        e.load.finished + "/" + e.load.total + " requests");
    }
    if (e.eta_s != null && e.phase === "running") parts.push("ETA " + duration(e.eta_s));
    const failed = e.retry ? "queued" : e.cancelled ? "cancelled" : "failed";
    const state = { started: "running", running: "running", done: "done", failed: failed }[e.phase];
    if (e.phase === "done") fraction = 1;
    const badge = text(row, "state", state);
    if (badge) badge.className = "badge " + ({ done: "good", failed: "bad", cancelled: "warn", running: "info" }[state] || "none");
    if (fraction != null) {
      const bar = row.querySelector('[data-field="bar"]');
      if (bar) bar.value = fraction;
      text(row, "percent", Math.round(fraction * 100) + " %");
    }
    if (parts.length || e.phase === "done" || e.phase === "failed") text(row, "text", parts.join(" · "));
    // A finished quality job's closing message restates the counts of its progress line.
    if (e.message && !(e.phase === "done" && e.cases)) text(row, "message", e.message);
  });
  source.addEventListener("state", function (message) {
    const badge = document.getElementById("study-state");
    if (badge) {
      badge.textContent = message.data;
      badge.className = "badge " + ({ done: "good", running: "info", locked: "info", cancelled: "warn", failed: "bad" }[message.data] || "none");
    }
    // A run that has finished has new verdicts and records: say so, with a link to them.
    const finished = ["done", "failed", "cancelled"].indexOf(message.data) >= 0;
    if (seenState === "running" && finished && live) {
      live.className = "notice";
      live.textContent = message.data === "done" ? "The run has finished. " : "The run has ended (" + message.data + "). ";
      const link = document.createElement("a");
      link.href = window.location.pathname + window.location.search;
      link.textContent = "Show the verdicts and records";
      live.appendChild(link);
    }
    seenState = message.data;
    connected();
  });
  source.addEventListener("error", function () {
    if (live) live.textContent = "Live updates paused (reconnecting)…";
  });
})();
