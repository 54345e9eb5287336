// Deskhand console: small progressive enhancements. Pages work without this file.
(function () {
  "use strict";

  // A reconnecting stream resumes from Last-Event-ID, but if htmx re-creates the
  // EventSource from scratch it replays from the page's starting point: skip
  // steps the timeline already shows instead of appending them twice.
  document.addEventListener("htmx:sseBeforeMessage", function (evt) {
    var id = evt.detail && evt.detail.lastEventId;
    if (evt.detail && evt.detail.type === "step" && id && document.getElementById("step-" + id)) {
      evt.preventDefault();
    }
  });

  // The first step replaces the "waiting" hint.
  document.addEventListener("htmx:sseMessage", function (evt) {
    if (evt.detail && evt.detail.type === "step") {
      var hint = document.querySelector(".waiting-first");
      if (hint) hint.remove();
    }
  });

  // If the stream keeps failing (e.g. a WSGI deployment that cannot stream),
  // fall back to polling the steps partial every two seconds.
  var failures = 0;
  document.addEventListener("htmx:sseError", function (evt) {
    var source = evt.detail && evt.detail.source;
    if (source && source.readyState === 2 && ++failures >= 3 && !/[?&]live=poll/.test(location.search)) {
      location.search = (location.search ? location.search + "&" : "?") + "live=poll";
    }
  });
  document.addEventListener("htmx:sseOpen", function () { failures = 0; });

  // Expiry countdowns: "expires in 3h 02m", refreshed every 15 s.
  function fmt(seconds) {
    if (seconds <= 0) return "expired";
    var m = Math.floor(seconds / 60), h = Math.floor(m / 60), d = Math.floor(h / 24);
    if (d >= 2) return "expires in " + d + "d " + (h % 24) + "h";
    if (h >= 1) return "expires in " + h + "h " + String(m % 60).padStart(2, "0") + "m";
    if (m >= 1) return "expires in " + m + "m " + String(Math.floor(seconds % 60)).padStart(2, "0") + "s";
    return "expires in " + Math.floor(seconds) + " s";
  }
  // Relative times ("4 min ago", the exact time on hover) stay true on a page left open;
  // the same wording as deskhand/console/story.py:ago.
  function ago(seconds) {
    if (seconds < 45) return "just now";
    if (seconds < 3600) return Math.max(1, Math.round(seconds / 60)) + " min ago";
    if (seconds < 86400) return Math.floor(seconds / 3600) + " h ago";
    var d = Math.floor(seconds / 86400);
    if (d < 7) return d + (d === 1 ? " day ago" : " days ago");
    return null;  // older: the server's date stays
  }
  function tick() {
    document.querySelectorAll("time[data-ago]").forEach(function (el) {
      var at = Date.parse(el.getAttribute("datetime"));
      var text = isNaN(at) ? null : ago((Date.now() - at) / 1000);
      if (text) el.textContent = text;
    });
    document.querySelectorAll("[data-countdown]").forEach(function (el) {
      var at = Date.parse(el.getAttribute("data-countdown"));
      if (!isNaN(at)) el.textContent = fmt((at - Date.now()) / 1000);
    });
  }
  document.addEventListener("DOMContentLoaded", tick);
  document.addEventListener("htmx:afterSettle", tick);
  setInterval(tick, 15000);
})();
