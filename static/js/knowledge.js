// The knowledge page's upload form, sent with XMLHttpRequest so a <progress> follows the
// upload; without this script the same form posts as a plain multipart form. Results are
// drawn with textContent only: file names and messages are hostile input.
(function () {
  "use strict";

  function item(text, isError) {
    const li = document.createElement("li");
    li.textContent = text;
    if (isError) li.className = "error";
    return li;
  }

  function enhance(form) {
    const progress = form.querySelector("#upload-progress");
    const status = form.querySelector("#upload-status");
    const list = form.querySelector("#upload-results");
    form.addEventListener("submit", function (event) {
      event.preventDefault();
      const field = form.querySelector('input[name="csrf_token"]');
      const xhr = new XMLHttpRequest();
      xhr.open("POST", form.action);
      xhr.setRequestHeader("Accept", "application/json");
      if (field) xhr.setRequestHeader("X-CSRF-Token", field.value);
      progress.hidden = false;
      progress.max = 100;
      progress.value = 0;
      status.textContent = "Uploading…";
      list.replaceChildren();
      xhr.upload.onprogress = function (e) {
        if (e.lengthComputable) {
          progress.max = e.total;
          progress.value = e.loaded;
        }
      };
      xhr.upload.onload = function () {
        progress.value = progress.max;
      };
      xhr.onload = function () {
        let body = null;
        try {
          body = JSON.parse(xhr.responseText);
        } catch (err) {
          body = null;
        }
        if (!body || !Array.isArray(body.results)) {
          status.textContent = "The upload failed (HTTP " + xhr.status + ").";
          return;
        }
        progress.value = progress.max;
        if (body.error) list.appendChild(item(body.error, true));
        body.results.forEach(function (r) {
          list.appendChild(r.error ? item(r.error, true) : item(r.file + ": " + r.status + " (" + r.id + ")", false));
        });
        status.textContent = xhr.status === 200 ? "Upload finished." : "Some files were not added.";
      };
      xhr.onerror = function () {
        status.textContent = "The upload failed: the connection broke.";
      };
      xhr.send(new FormData(form));
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    const form = document.getElementById("knowledge-upload");
    if (form) enhance(form);
  });
})();
