/* threadwarden console: the live timeline of a thread page (server-sent events).
   A record event's data is the record's HTML, rendered and escaped by the server. After a record
   arrives, the submissions table is fetched again, so states settle without a reload.
   A delta event's data is JSON {submission_id, step, text, restart}: a fragment of a step's text
   while the model generates it. It grows a live element at the end of the timeline (its text
   set as text, never parsed as HTML), which the step's journaled record (a tool-result with the
   same data-submission and data-step) replaces; the submission's settlement removes what is
   left of its live text. */
(function () {
  "use strict";
  let source = null;
  let timeline = null;
  let started = new Set(); // the steps this connection has sent text of

  function refreshSubmissions() {
    const box = document.getElementById("submissions-box");
    if (box && window.htmx) {
      window.htmx.ajax("GET", box.dataset.src, { target: box, swap: "innerHTML" });
    }
  }

  function liveElements(list, submission, step) {
    return Array.prototype.filter.call(list.children, function (item) {
      return item.classList.contains("live") && item.dataset.submission === submission &&
        (step === undefined || item.dataset.step === step);
    });
  }

  function settled(list, submission) {
    return Array.prototype.some.call(list.children, function (item) {
      return item.dataset.kind === "settlement" && item.dataset.submission === submission;
    });
  }

  function newLiveElement(list, submission, step) {
    const item = document.createElement("li");
    item.className = "record live";
    item.dataset.submission = submission;
    item.dataset.step = step;
    const label = document.createElement("span");
    label.className = "seq";
    label.textContent = "live";
    const kind = document.createElement("strong");
    kind.textContent = "generating";
    const sub = document.createElement("span");
    sub.className = "sub";
    sub.textContent = submission;
    item.append(label, " ", kind, " ", sub, document.createElement("pre"));
    list.appendChild(item);
    return item;
  }

  function onDelta(list, event) {
    let delta;
    try {
      delta = JSON.parse(event.data);
    } catch (error) {
      return;
    }
    if (!delta || typeof delta.submission_id !== "string" || typeof delta.text !== "string" ||
        !Number.isInteger(delta.step)) return;
    const submission = delta.submission_id;
    const step = String(delta.step);
    if (settled(list, submission)) return;
    let item = liveElements(list, submission, step)[0];
    if (!item) item = newLiveElement(list, submission, step);
    const text = item.querySelector("pre");
    const key = submission + "\n" + step;
    // A connection's first text of a step is the step's text so far, whole (a reconnected
    // stream starts again): it replaces what was shown, as a restart does.
    if (delta.restart || !started.has(key)) {
      text.textContent = delta.text;
    } else {
      text.textContent += delta.text;
    }
    started.add(key);
  }

  function onRecord(list, event) {
    const seq = event.lastEventId;
    if (document.getElementById("record-" + seq)) return;
    const live = Array.prototype.find.call(list.children, function (item) {
      return item.classList.contains("live");
    });
    if (live) {
      live.insertAdjacentHTML("beforebegin", event.data); // the live text stays last
    } else {
      list.insertAdjacentHTML("beforeend", event.data);
    }
    const record = document.getElementById("record-" + seq);
    if (record && record.dataset.submission) {
      const kind = record.dataset.kind;
      if (kind === "settlement") {
        liveElements(list, record.dataset.submission).forEach(function (item) { item.remove(); });
      } else if (kind === "tool-result" && record.dataset.step) {
        liveElements(list, record.dataset.submission, record.dataset.step).forEach(
          function (item) { item.remove(); });
      }
    }
    refreshSubmissions();
  }

  function connect() {
    const found = document.getElementById("timeline");
    if (found === timeline) return;
    if (source) source.close();
    source = null;
    timeline = found;
    if (!found || !found.dataset.events) return;
    source = new EventSource(found.dataset.events);
    source.addEventListener("record", function (event) { onRecord(found, event); });
    source.addEventListener("delta", function (event) { onDelta(found, event); });
    source.addEventListener("open", function () {
      started = new Set();
      document.body.dataset.live = "open";
    });
  }

  document.addEventListener("DOMContentLoaded", connect);
  document.addEventListener("htmx:afterSettle", connect);
})();
