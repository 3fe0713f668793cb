// File pickers for file fields (templates/macros/forms.html, `file_picker`): each chosen file
// is uploaded to the project's files API (POST /api/workflows/<id>/files, the browser session
// with its CSRF token) and its id written into the field's id control, which the form submits.
// Without this script the id control stays visible and takes ids typed by hand.
(() => {
  const units = ["bytes", "KB", "MB", "GB"];

  function size(bytes) {
    if (bytes < 10240) return `${bytes} bytes`;
    let value = bytes;
    let unit = 0;
    while (value >= 1024 && unit < units.length - 1) {
      value /= 1024;
      unit += 1;
    }
    return unit === 0 ? `${value} bytes` : `${value.toFixed(value < 10 ? 1 : 0)} ${units[unit]}`;
  }

  function csrfToken(form) {
    const field = form && form.querySelector('input[name="csrf_token"]');
    return field ? field.value : "";
  }

  function serverMessage(xhr) {
    try {
      const doc = JSON.parse(xhr.responseText);
      if (doc && doc.error && doc.error.message) return doc.error.message;
    } catch {
      // not JSON: fall through to the status line
    }
    return `the server answered ${xhr.status || "nothing"}${xhr.statusText ? ` ${xhr.statusText}` : ""}`;
  }

  class Picker {
    constructor(root) {
      this.root = root;
      this.ids = document.getElementById(root.dataset.for);
      this.multiple = this.ids.tagName === "TEXTAREA";
      this.input = root.querySelector('input[type="file"]');
      this.list = root.querySelector(".file-list");
      this.status = root.querySelector(".upload-status");
      this.progress = root.querySelector("progress");
      this.error = root.querySelector(".error");
      this.form = root.closest("form");
      this.maxBytes = Number(root.dataset.maxBytes) || 0;
      this.files = []; // {id, name, size}
      this.busy = 0;
    }

    start() {
      // The label names the picker now; the id control stays in the form, out of sight.
      const label = this.form && this.form.querySelector(`label[for="${CSS.escape(this.ids.id)}"]`);
      if (label) label.htmlFor = this.input.id;
      if (this.ids.required) {
        this.ids.required = false;
        this.input.setAttribute("aria-required", "true");
      }
      this.ids.hidden = true;
      this.ids.setAttribute("aria-hidden", "true");
      this.ids.tabIndex = -1;
      for (const id of this.ids.value.split(/\s+/).filter(Boolean)) {
        this.files.push({ id, name: id, size: null });
      }
      this.root.hidden = false;
      this.render();
      this.input.addEventListener("change", () => this.chosen());
    }

    chosen() {
      const picked = Array.from(this.input.files || []);
      this.input.value = "";
      this.showError("");
      if (!picked.length) return;
      const tooBig = picked.filter((f) => this.maxBytes && f.size > this.maxBytes);
      if (tooBig.length) {
        const names = tooBig.map((f) => `“${f.name}” (${size(f.size)})`).join(", ");
        this.showError(
          `${names} ${tooBig.length > 1 ? "are" : "is"} larger than the ${size(this.maxBytes)} limit per file; nothing was uploaded.`,
        );
        return;
      }
      const queue = this.multiple ? picked : picked.slice(0, 1);
      queue.reduce((done, file) => done.then(() => this.upload(file)), Promise.resolve());
    }

    upload(file) {
      return new Promise((resolve) => {
        const xhr = new XMLHttpRequest();
        const query = new URLSearchParams({ fileName: file.name });
        if (/^[\w.+-]+\/[\w.+-]+$/.test(file.type)) query.set("mimeType", file.type);
        xhr.open("POST", `${this.root.dataset.upload}?${query}`);
        xhr.setRequestHeader("Content-Type", "application/octet-stream");
        xhr.setRequestHeader("X-CSRF-Token", csrfToken(this.form));
        this.setBusy(1);
        this.status.textContent = `Uploading “${file.name}”…`;
        this.progress.value = 0;
        this.progress.hidden = false;
        this.progress.setAttribute("aria-label", `Uploading ${file.name}`);
        xhr.upload.addEventListener("progress", (event) => {
          if (event.lengthComputable) this.progress.value = Math.round((100 * event.loaded) / event.total);
        });
        const finish = (message) => {
          this.progress.hidden = true;
          this.setBusy(-1);
          if (message) {
            this.status.textContent = "";
            this.showError(`“${file.name}” was not uploaded: ${message}`);
          }
          resolve();
        };
        xhr.addEventListener("load", () => {
          if (xhr.status !== 201) {
            finish(serverMessage(xhr));
            return;
          }
          const row = JSON.parse(xhr.responseText).data[0];
          const entry = { id: row.id, name: row.name, size: row.size };
          this.files = this.multiple ? [...this.files, entry] : [entry];
          this.render();
          this.status.textContent = `Uploaded “${row.name}”.`;
          finish("");
        });
        xhr.addEventListener("error", () => finish("the connection failed"));
        xhr.addEventListener("abort", () => finish("the upload was stopped"));
        xhr.send(file);
      });
    }

    setBusy(delta) {
      this.busy += delta;
      if (!this.form) return;
      for (const button of this.form.querySelectorAll('button[type="submit"], button:not([type])')) {
        if (button.value === "accept" || !button.value) button.disabled = this.busy > 0;
      }
    }

    remove(index) {
      const [gone] = this.files.splice(index, 1);
      this.render();
      this.status.textContent = gone ? `Removed “${gone.name}”.` : "";
      this.input.focus();
    }

    render() {
      this.ids.value = this.files.map((f) => f.id).join(this.multiple ? "\n" : "");
      this.list.replaceChildren(
        ...this.files.map((f, index) => {
          const item = document.createElement("li");
          item.dataset.fileId = f.id;
          const name = document.createElement("span");
          name.textContent = f.size === null ? f.name : `${f.name} (${size(f.size)})`;
          const id = document.createElement("code");
          id.textContent = f.id;
          const button = document.createElement("button");
          button.type = "button";
          button.className = "secondary";
          button.textContent = "Remove";
          button.setAttribute("aria-label", `Remove ${f.name}`);
          button.addEventListener("click", () => this.remove(index));
          item.append(name, " ", id, " ", button);
          return item;
        }),
      );
      this.list.hidden = this.files.length === 0;
    }

    showError(text) {
      this.error.textContent = text;
      this.error.hidden = !text;
    }
  }

  function enhance(root) {
    for (const el of root.querySelectorAll("[data-file-picker]")) {
      if (el.dataset.started) continue;
      el.dataset.started = "true";
      new Picker(el).start();
    }
  }

  document.addEventListener("DOMContentLoaded", () => enhance(document));
  document.addEventListener("htmx:load", (event) => enhance(event.target));
})();
