// Refreshes the page's content every few seconds, in place, while it says so (data-refresh="on"); without
// JavaScript the page refreshes itself through <noscript><meta http-equiv="refresh">. follow.js sets
// data-refresh="follow" while it shows a run's output live, and asks for one refresh when the run ends.
"use strict";
(function () {
  var PERIOD = 2000;
  document.documentElement.dataset.refresh = "script"; // says that this script runs (the tests read it)
  function refresh() {
    var main = document.getElementById("content");
    return fetch(window.location.href, { credentials: "same-origin", cache: "no-store" })
      .then(function (answer) { return answer.ok ? answer.text() : null; })
      .then(function (html) {
        if (html === null) { return; }
        var fresh = new DOMParser().parseFromString(html, "text/html").getElementById("content");
        var focused = document.activeElement && main.contains(document.activeElement);
        if (fresh && !focused) {
          main.replaceWith(document.adoptNode(fresh));
          document.dispatchEvent(new Event("hookrunner:refreshed"));
        }
      })
      .catch(function () {});
  }
  function tick() {
    var main = document.getElementById("content");
    if (!main || main.dataset.refresh === "off") { return; }
    if (main.dataset.refresh !== "on") { window.setTimeout(tick, PERIOD); return; }
    refresh().finally(function () { window.setTimeout(tick, PERIOD); });
  }
  window.hookrunnerRefresh = refresh;
  window.setTimeout(tick, PERIOD);
})();
