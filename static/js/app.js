// Small behaviours only; no inline scripts anywhere (the CSP forbids them).
document.addEventListener("click", async (event) => {
  const button = event.target.closest("[data-copy-target]");
  if (!button) return;
  const source = document.getElementById(button.dataset.copyTarget);
  if (!source) return;
  const text = source.innerText;
  try {
    await navigator.clipboard.writeText(text);
  } catch {
    const area = document.createElement("textarea");
    area.value = text;
    document.body.appendChild(area);
    area.select();
    document.execCommand("copy");
    area.remove();
  }
  const label = button.textContent;
  button.textContent = "Copied";
  button.dataset.copied = "true";
  setTimeout(() => { button.textContent = label; }, 1500);
});

// datetime-local controls send the browser's wall-clock time; the hidden field beside each
// (`tzoffset:<name>`, templates/macros/forms.html) carries the browser's offset from UTC at
// that moment, in minutes east (+330 in India), so the server stores the right instant.
// A value the server sent back as an instant (`data-instant`) is shown in local time.
function pad(n) {
  return String(n).padStart(2, "0");
}

function fillOffset(control) {
  const hidden = control.form && control.form.querySelector(`input[data-tz-offset-for="${CSS.escape(control.id)}"]`);
  if (!hidden) return;
  const moment = control.value ? new Date(control.value) : null;
  hidden.value = moment && !Number.isNaN(moment.getTime()) ? String(-moment.getTimezoneOffset()) : "";
}

function startDateTimes(root) {
  for (const control of root.querySelectorAll('input[type="datetime-local"]')) {
    const instant = control.dataset.instant ? new Date(control.dataset.instant) : null;
    if (instant && !Number.isNaN(instant.getTime()) && !control.value) {
      control.value = `${instant.getFullYear()}-${pad(instant.getMonth() + 1)}-${pad(instant.getDate())}T${pad(instant.getHours())}:${pad(instant.getMinutes())}`;
    }
    fillOffset(control);
  }
}

document.addEventListener("input", (event) => {
  if (event.target.matches && event.target.matches('input[type="datetime-local"]')) fillOffset(event.target);
});
document.addEventListener("change", (event) => {
  if (event.target.matches && event.target.matches('input[type="datetime-local"]')) fillOffset(event.target);
});

// The inbox (/inbox): "Nothing is waiting" shows whenever no card is still pending (an
// answered card stays in place with its state line until the next reload).
function updateEmptyState() {
  const empty = document.getElementById("no-pending");
  const list = document.getElementById("interaction-list");
  if (!empty || !list) return;
  empty.hidden = list.querySelector('article.interaction[data-status="pending"]') !== null;
}

document.addEventListener("DOMContentLoaded", () => {
  startDateTimes(document);
  updateEmptyState();
});
document.addEventListener("htmx:load", (event) => startDateTimes(event.target));
document.addEventListener("htmx:afterSettle", updateEmptyState);
document.addEventListener("htmx:sseMessage", updateEmptyState);

// A run's timeline in the inbox (conversations/_timeline.html) follows the run over SSE and,
// once after an answer, is re-read by a GET. A run's end is its last event: a GET answered
// while the run still ran but arriving after that event would show the ended run as running
// for good, so a timeline marked finished (`data-finished`) is never replaced by one that is not.
const pageParser = new DOMParser();

function isFinishedTimeline(root) {
  return root.querySelector("ol.timeline-steps[data-finished]") !== null;
}

document.addEventListener("htmx:beforeSwap", (event) => {
  const target = event.detail.target;
  if (!target || !target.classList || !target.classList.contains("timeline") || !isFinishedTimeline(target)) return;
  const incoming = pageParser.parseFromString(event.detail.serverResponse || "", "text/html");
  if (!isFinishedTimeline(incoming)) event.detail.shouldSwap = false;
});
