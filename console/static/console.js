/* threadwarden console: the live timeline of a thread page (server-sent events).
   Each event's data is the record's HTML, rendered and escaped by the server. After a record
   arrives, the submissions table is fetched again, so states settle without a reload. */
(function () {
  "use strict";
  let source = null;
  let timeline = null;

  function refreshSubmissions() {
    const box = document.getElementById("submissions-box");
    if (box && window.htmx) {
      window.htmx.ajax("GET", box.dataset.src, { target: box, swap: "innerHTML" });
    }
  }

  function connect() {
    const found = document.getElementById("timeline");
    if (found === timeline) return;
    if (source) source.close();
    source = null;
    timeline = found;
    if (!found || !found.dataset.events) return;
    source = new EventSource(found.dataset.events);
    source.addEventListener("record", function (event) {
      const seq = event.lastEventId;
      if (document.getElementById("record-" + seq)) return;
      found.insertAdjacentHTML("beforeend", event.data);
      refreshSubmissions();
    });
    source.addEventListener("open", function () {
      document.body.dataset.live = "open";
    });
  }

  document.addEventListener("DOMContentLoaded", connect);
  document.addEventListener("htmx:afterSettle", connect);
})();
