// taskq dashboard: live numbers on the overview, live progress on a task page.
// Everything received is placed with textContent, never parsed as HTML.
"use strict";

(function () {
  var body = document.body;

  function $(id) {
    return document.getElementById(id);
  }

  // --- overview: poll /api/overview and rebuild the tables from its view model -------------

  function cellOf(cell) {
    var td = document.createElement("td");
    td.dataset.k = cell.k;
    if (cell.cls) td.className = cell.cls;
    if (cell.href) {
      var a = document.createElement("a");
      a.setAttribute("href", cell.href);
      a.textContent = cell.text;
      td.appendChild(a);
    } else {
      td.textContent = cell.text;
    }
    return td;
  }

  function fillTable(name, rows) {
    var tbody = $("t-" + name);
    if (!tbody) return;
    var fresh = document.createDocumentFragment();
    rows.forEach(function (row) {
      var tr = document.createElement("tr");
      Object.keys(row.attrs).forEach(function (key) {
        if (key.indexOf("data-") === 0) tr.setAttribute(key, row.attrs[key]);
      });
      row.cells.forEach(function (cell) {
        tr.appendChild(cellOf(cell));
      });
      fresh.appendChild(tr);
    });
    if (!rows.length) {
      var tr = document.createElement("tr");
      var td = document.createElement("td");
      tr.className = "empty";
      td.colSpan = Number(tbody.dataset.cols) || 1;
      td.textContent = tbody.dataset.empty || "";
      tr.appendChild(td);
      fresh.appendChild(tr);
    }
    tbody.replaceChildren(fresh);
  }

  function renderOverview(o) {
    var banner = $("protection");
    banner.className = "banner " + o.protection.cls;
    $("level-text").textContent = o.protection.text;
    $("level-reason").textContent = o.protection.reason;
    $("generated-at").textContent = o.generated_at;
    $("health").textContent = o.health;
    Object.keys(o.tables).forEach(function (name) {
      fillTable(name, o.tables[name]);
    });
  }

  // --- charts: reload each <img> (an SVG drawn on the server) with a fresh query ------------

  function refreshCharts() {
    Array.prototype.forEach.call(document.querySelectorAll("img.chart"), function (img) {
      var url = new URL(img.getAttribute("src"), window.location.href);
      url.searchParams.set("t", String(Date.now()));
      var next = new Image();
      next.onload = function () {
        img.src = next.src; // swap only once loaded: no flicker, no broken image on errors
      };
      next.src = url.pathname + url.search;
    });
  }

  function pollCharts() {
    var every = Math.max(Number(body.dataset.refreshMs) || 2000, 5000);
    setInterval(function () {
      if (!document.hidden) refreshCharts();
    }, every);
  }

  function pollOverview() {
    var every = Number(body.dataset.refreshMs) || 2000;
    var stale = $("stale");
    function tick() {
      if (document.hidden) {
        setTimeout(tick, every);
        return;
      }
      fetch("/api/overview", {
        headers: { Accept: "application/json" },
        credentials: "same-origin",
        cache: "no-store",
      })
        .then(function (response) {
          if (!response.ok) throw new Error("HTTP " + response.status);
          return response.json();
        })
        .then(function (o) {
          renderOverview(o);
          refreshCharts();
          stale.hidden = true;
        })
        .catch(function () {
          stale.hidden = false;
        })
        .then(function () {
          setTimeout(tick, every);
        });
    }
    setTimeout(tick, every);
  }

  // --- task page: follow /tasks/ID/events (Server-Sent Events) ------------------------------

  function applyState(s) {
    var status = $("task-status");
    if (status && s.status) {
      status.textContent = s.status;
      status.className = "status s-" + s.status.toLowerCase();
    }
    var bar = $("task-progress");
    if (bar && typeof s.percent === "number") {
      bar.value = s.percent;
      $("task-percent").textContent = Math.round(s.percent) + "%";
    }
    if (s.message !== undefined && $("task-message")) {
      $("task-message").textContent = s.message || "";
    }
    if (typeof s.retry_count === "number" && $("task-attempts")) {
      var max = s.max_retry_count === null ? "-" : s.max_retry_count;
      $("task-attempts").textContent = s.retry_count + "/" + max;
    }
  }

  function followTask(url) {
    var source = new EventSource(url);
    var note = $("live-note");
    function handle(event) {
      applyState(JSON.parse(event.data));
    }
    source.addEventListener("state", handle);
    source.addEventListener("progress", handle);
    source.addEventListener("final", function (event) {
      handle(event);
      source.close();
      if (note) note.textContent = "finished";
      // Show the final row (finish time, error, children) as the server renders it.
      setTimeout(function () {
        window.location.reload();
      }, 500);
    });
    source.addEventListener("gone", function () {
      source.close();
      if (note) note.textContent = "the task is gone";
    });
    source.onerror = function () {
      if (note) note.textContent = "reconnecting…";
    };
    source.onopen = function () {
      if (note) note.textContent = "live";
    };
  }

  if (body.dataset.page === "overview") pollOverview();
  if (body.dataset.page === "type") pollCharts();
  if (body.dataset.live) followTask(body.dataset.live);
})();
