// drover status page: refresh the data in place, never what the operator is typing or choosing.
//
// Served from the page's own origin (CSP script-src 'self'); the page works without it, where a
// <noscript> meta refresh reloads the pages that have nothing to type into. Every refresh interval
// (body data-refresh, seconds) this fetches the page's own URL and swaps each [data-live] element
// for the fresh copy with the same id. It skips a round while the operator is busy in a live
// region: focus in one of its fields, a ticked checkbox, an open <details>, or selected text;
// and while the tab is hidden. The filter form is outside the live regions, so typing there is
// never touched. The state is in body[data-live-state] and the header's #live-status, the
// number of rounds so far in body[data-live-rounds].
(function () {
  "use strict";
  var body = document.body;
  var seconds = Number(body.getAttribute("data-refresh") || "0");
  var status = document.getElementById("live-status");
  if (!(seconds > 0) || !window.fetch || !window.DOMParser) {
    return;
  }

  function say(state, text) {
    body.setAttribute("data-live-state", state);
    if (status) {
      status.textContent = text;
    }
  }

  function regions() {
    return Array.prototype.slice.call(document.querySelectorAll("[data-live][id]"));
  }

  function typing(element) {
    // A control that holds what the operator enters; a checkbox's state is checked below.
    if (element.tagName === "TEXTAREA" || element.tagName === "SELECT") {
      return true;
    }
    return element.tagName === "INPUT" &&
      !/^(checkbox|radio|button|submit|reset|hidden)$/.test(element.type);
  }

  function busy() {
    var active = document.activeElement;
    var selection = window.getSelection ? window.getSelection() : null;
    var live = regions();
    for (var i = 0; i < live.length; i++) {
      var region = live[i];
      if (active && region.contains(active) && typing(active)) {
        return "while a field has focus";
      }
      if (region.querySelector("input[type=checkbox]:checked")) {
        return "while jobs are selected";
      }
      if (region.querySelector("details[open]")) {
        return "while a section is open";
      }
      if (selection && !selection.isCollapsed && region.contains(selection.anchorNode)) {
        return "while text is selected";
      }
    }
    return null;
  }

  var pending = false;
  var rounds = 0;

  function swap(html) {
    var fresh = new DOMParser().parseFromString(html, "text/html");
    regions().forEach(function (old) {
      var next = fresh.getElementById(old.id);
      if (next && next.hasAttribute("data-live")) {
        old.replaceWith(document.importNode(next, true));
      }
    });
  }

  function refresh() {
    if (pending || document.hidden) {
      return;
    }
    rounds += 1; // each round looked at, refreshed or skipped (tests wait on it)
    body.setAttribute("data-live-rounds", String(rounds));
    var why = busy();
    if (why) {
      say("paused", "auto-refresh paused " + why);
      return;
    }
    pending = true;
    fetch(window.location.href, { credentials: "same-origin", cache: "no-store" })
      .then(function (response) {
        if (!response.ok) {
          throw new Error("HTTP " + response.status);
        }
        return response.text();
      })
      .then(function (html) {
        var late = busy(); // the operator may have started while the page was on its way
        if (late) {
          say("paused", "auto-refresh paused " + late);
          return;
        }
        swap(html);
        say("live", "updated " + new Date().toLocaleTimeString());
      })
      .catch(function () {
        say("failed", "refresh failed; trying again");
      })
      .then(function () {
        pending = false;
      });
  }

  say("live", "auto-refresh every " + seconds + " s");
  window.setInterval(refresh, seconds * 1000);
})();
