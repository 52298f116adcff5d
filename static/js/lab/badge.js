/* The breaker badge: counts the cooldown down from open_until_ms, corrected for the
 * difference between the server's clock and this one; at zero it reads HALF-OPEN (an open
 * breaker whose cooldown elapsed lets the next call through as the probe). With a breaker per
 * host (data-scope="host") the badge lists each host's breaker, each with its own cooldown
 * (data-open-until-ms on its row). State changes are announced to screen readers. */

import { announce, stateLabels } from "./util.js";

const LABELS = stateLabels();

/** Keep the badge counting. ``onChange()`` is called whenever what it shows may have changed. */
export function createBadge(onChange) {
  let clockOffset = 0; // server clock minus this clock, in ms
  let announcedState = null;
  let announcedParts = null; // part key -> state, last announced

  function toHalfOpen(item) {
    item.dataset.state = "half_open";
    const label = item.querySelector('[data-role="state"]');
    if (label) {
      label.textContent = LABELS.half_open;
      label.className = label.className.replace(/breaker-(closed|open|half_open)\b/, "breaker-half_open");
    }
    const cooldown = item.querySelector('[data-role="cooldown"]');
    if (cooldown) cooldown.textContent = "cooldown over: the next call is the probe";
  }

  // An open breaker (the badge, or a host's row of it): seconds left, HALF-OPEN at zero.
  // True when it just turned half-open.
  function countDown(item) {
    if (item.dataset.state !== "open") return false;
    const until = parseFloat(item.dataset.openUntilMs);
    if (!until) return false; // forced open: no cooldown
    const left = until - now();
    if (left > 0) {
      const seconds = item.querySelector('[data-role="seconds"]');
      if (seconds) seconds.textContent = (left / 1000).toFixed(1);
      return false;
    }
    toHalfOpen(item);
    onChange();
    return true;
  }

  function tick() {
    const badge = document.getElementById("breaker-badge");
    if (!badge) return;
    if (badge.dataset.scope === "host") {
      badge.querySelectorAll("li[data-part]").forEach(function (item) {
        if (countDown(item) && announcedParts) announcedParts[item.dataset.part] = "half_open";
      });
    } else if (countDown(badge)) {
      announce("Breaker HALF-OPEN: the cooldown is over, the next call is a probe");
      announcedState = "half_open";
    }
  }

  /** A badge rendered by the server (on load, or pushed): its clock, and what changed. */
  function arrived(badge) {
    const serverNow = parseFloat(badge.dataset.serverNowMs);
    if (serverNow) clockOffset = serverNow - Date.now();
    if (badge.dataset.scope === "host") {
      const states = {};
      const changed = [];
      badge.querySelectorAll("li[data-part]").forEach(function (item) {
        states[item.dataset.part] = item.dataset.state;
        if (announcedParts && announcedParts[item.dataset.part] !== item.dataset.state) {
          changed.push(item.firstChild.textContent.trim() + "'s breaker " + (LABELS[item.dataset.state] || item.dataset.state));
        }
      });
      if (changed.length) announce(changed.join("; "));
      announcedParts = states;
      announcedState = null;
    } else {
      const state = badge.dataset.state;
      if (announcedState !== null && state !== announcedState) {
        announce("Breaker " + (LABELS[state] || state));
      }
      announcedState = state;
      announcedParts = null;
    }
    tick();
    onChange();
  }

  /** The server's clock now, in ms since the epoch. */
  function now() {
    return Date.now() + clockOffset;
  }

  window.setInterval(tick, 100);
  return { arrived: arrived, now: now, labels: LABELS };
}
