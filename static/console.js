// Deskhand console: small progressive enhancements. Pages work without this file.
(function () {
  "use strict";
  document.documentElement.classList.add("js");

  // The menu folds behind a button on a phone (CSS shows the button only there, only with JS).
  document.addEventListener("click", function (evt) {
    var button = evt.target.closest && evt.target.closest(".menu-toggle");
    if (!button) return;
    var top = button.closest(".top");
    var open = top.classList.toggle("open");
    button.setAttribute("aria-expanded", open ? "true" : "false");
  });

  // Money typed as people read it: "150" and "150.00" are both 150 of the currency, "1.5" is 1.50.
  // The same rule as deskhand/domain/desk/money.py:parse_amount, on text (no float), for a live preview.
  // ``digits``: the currency's minor digits (2 for USD, 0 for JPY, 3 for KWD: money.py's MINOR_DIGITS).
  function parseCents(text, digits) {
    var t = String(text).replace(/[\s,\u00a0]/g, "").replace(/^[$€£¥]/, "").replace(/[A-Za-z]{3}$/, "");
    var m = /^(\d{0,12})(?:\.(\d*))?$/.exec(t);
    if (!t || !m || (!m[1] && !m[2]) || (m[2] || "").length > digits) return null;
    var unit = Math.pow(10, digits);
    return parseInt(m[1] || "0", 10) * unit + (digits ? parseInt(((m[2] || "") + "000").slice(0, digits), 10) : 0);
  }
  function showCents(cents, symbol, code, digits) {
    var unit = Math.pow(10, digits);
    var whole = String(Math.floor(cents / unit)).replace(/\B(?=(\d{3})+(?!\d))/g, ",");
    var amount = digits ? whole + "." + String(cents % unit).padStart(digits, "0") : whole;
    return symbol ? symbol + amount : amount + " " + code;
  }
  function preview(input) {
    var out = document.getElementById(input.getAttribute("data-preview"));
    if (!out) return;
    var digits = parseInt(input.getAttribute("data-digits") || "2", 10);
    var cents = parseCents(input.value, digits);
    var max = parseInt(input.getAttribute("data-max-cents"), 10);
    var symbol = input.getAttribute("data-symbol"), code = input.getAttribute("data-currency");
    var of = showCents(max, symbol, code, digits);
    if (cents === null) out.textContent = "Type an amount like 12 or 12.50 (at most " + of + ").";
    else if (cents < 1) out.textContent = "The amount must be more than 0.";
    else if (cents > max) out.textContent = showCents(cents, symbol, code, digits) + " is more than the " + of + " proposed: you may only approve less.";
    else out.textContent = (input.getAttribute("data-verb") || "Refund") + " " + showCents(cents, symbol, code, digits) + " of " + of + " proposed.";
  }

  // A note's length while it is typed: the limit is said before the server has to refuse it.
  function count(area) {
    var out = document.getElementById(area.getAttribute("data-counter"));
    var max = parseInt(area.getAttribute("data-limit"), 10);
    if (!out || !max) return;
    var n = area.value.length;
    out.textContent = n > max
      ? n.toLocaleString("en") + " characters: " + (n - max).toLocaleString("en") + " over the limit of " + max.toLocaleString("en") + "."
      : n.toLocaleString("en") + " of " + max.toLocaleString("en") + " characters.";
    out.classList.toggle("over", n > max);
  }
  document.addEventListener("input", function (evt) {
    var el = evt.target;
    if (el.matches && el.matches("input[data-preview]")) preview(el);
    if (el.matches && el.matches("textarea[data-counter]")) count(el);
  });
  function enhance() {
    document.querySelectorAll("input[data-preview]").forEach(preview);
    document.querySelectorAll("textarea[data-counter]").forEach(count);
  }
  document.addEventListener("DOMContentLoaded", enhance);
  document.addEventListener("htmx:afterSettle", enhance);

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
    if (!evt.target || evt.target.id !== "live-region") return;  // the run's stream, not the counters'
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
  // the same wording as deskhand/web/console/story.py:ago.
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
