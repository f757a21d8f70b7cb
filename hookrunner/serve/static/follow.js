// Shows a running run's output as it comes: the run page's <pre data-follow> is followed with an
// EventSource (GET /api/v1/runs/<id>/output?follow=1, Server-Sent Events). Each event says where its bytes
// start in the run's output, so bytes the page already shows (rendered, or sent again after a reconnect)
// are skipped. The text is cleaned as the server cleans it (terminal escapes dropped, other control
// characters as U+FFFD) and added as text, never as HTML. When the run ends the page is refreshed once.
"use strict";
(function () {
  var ESCAPES = /\x1b(?:\[[0-?]*[ -\/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])/g;
  var CONTROLS = /[\x00-\x08\x0b-\x1f\x7f]/g;

  function clean(text) {
    return text.replace(/\r\n/g, "\n").replace(ESCAPES, "").replace(CONTROLS, "\ufffd");
  }

  // The event's exact bytes: its text (UTF-8), or, when the bytes are not UTF-8 on their own, its base64.
  function bytesOf(event) {
    if (event.output_base64 === undefined) { return new TextEncoder().encode(event.output); }
    var raw = atob(event.output_base64);
    var bytes = new Uint8Array(raw.length);
    for (var i = 0; i < raw.length; i++) { bytes[i] = raw.charCodeAt(i); }
    return bytes;
  }

  function follow() {
    var pre = document.getElementById("output");
    var main = document.getElementById("content");
    if (!pre || !pre.dataset.follow || !main || !window.EventSource) { return; }
    var position = parseInt(pre.dataset.size, 10) || 0;
    var decoder = new TextDecoder("utf-8");
    var source = new EventSource(pre.dataset.follow);
    var live = document.getElementById("live");
    main.dataset.refresh = "follow";
    if (live) { live.hidden = false; }

    function stop() {
      source.close();
      if (live) { live.hidden = true; }
      main.dataset.refresh = "on";
      if (window.hookrunnerRefresh) { window.hookrunnerRefresh(); }
    }

    source.addEventListener("output", function (message) {
      var event = JSON.parse(message.data);
      if (event.size <= position) { return; }
      var start = Math.max(event.offset, position);
      var text = "";
      if (start > position) { text = "\n[" + (start - position) + " bytes not kept]\n"; }
      text += decoder.decode(bytesOf(event).subarray(start - event.offset), { stream: true });
      position = event.size;
      var atBottom = pre.scrollHeight - pre.scrollTop - pre.clientHeight < 8;
      pre.appendChild(document.createTextNode(clean(text)));
      if (atBottom) { pre.scrollTop = pre.scrollHeight; }
      var size = document.getElementById("output-size");
      if (size) { size.textContent = String(position); }
    });
    source.addEventListener("end", stop);
    source.addEventListener("error", function () {
      // A dropped follower is reconnected by the browser (readyState CONNECTING); a refused one is not.
      if (source.readyState === EventSource.CLOSED) { stop(); }
    });
  }

  document.addEventListener("hookrunner:refreshed", follow);
  follow();
})();
