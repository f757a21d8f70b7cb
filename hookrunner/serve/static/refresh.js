// Refreshes the page's content every few seconds, in place, while it says so (data-refresh="on"); without
// JavaScript the page refreshes itself through <noscript><meta http-equiv="refresh">.
"use strict";
(function () {
  var PERIOD = 2000;
  document.documentElement.dataset.refresh = "script"; // says that this script runs (the tests read it)
  function tick() {
    var main = document.getElementById("content");
    if (!main || main.dataset.refresh !== "on") { return; }
    fetch(window.location.href, { credentials: "same-origin", cache: "no-store" })
      .then(function (answer) { return answer.ok ? answer.text() : null; })
      .then(function (html) {
        if (html === null) { return; }
        var fresh = new DOMParser().parseFromString(html, "text/html").getElementById("content");
        var focused = document.activeElement && main.contains(document.activeElement);
        if (fresh && !focused) {
          main.replaceWith(document.adoptNode(fresh));
        }
      })
      .catch(function () {})
      .finally(function () { window.setTimeout(tick, PERIOD); });
  }
  window.setTimeout(tick, PERIOD);
})();
